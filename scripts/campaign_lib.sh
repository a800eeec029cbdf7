# Sourced by the campaign scripts: `campaign NAME` sets up the work folder /tmp/NAME and an
# archive $OUT/NAME.tgz that is refreshed after every step and on exit, so a call cut at its
# limit keeps what ran; `step SECONDS LABEL COMMAND...` runs one step under a limit and logs
# its wall time in walltime.txt.
campaign() {
  OUT=${OUT:-/tmp/parabench-campaign}; W=/tmp/$1; ARCHIVE="$OUT/$1.tgz"
  rm -rf "$W"; mkdir -p "$W" "$OUT"
  export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PY=${PY:-python3} W
  trap 'tar czf "$ARCHIVE" -C "$W" .' EXIT; trap 'exit 143' TERM INT
}
step() {
  local limit=$1 name=$2; shift 2; local t0=$(date +%s)
  timeout "$limit" "$@" > "$W/$name.log" 2>&1; local rc=$?
  echo "$name: rc=$rc $(( $(date +%s) - t0 )) s" | tee -a "$W/walltime.txt"; tail -4 "$W/$name.log"
  tar czf "$ARCHIVE" -C "$W" .
}
