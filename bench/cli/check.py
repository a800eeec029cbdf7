"""`check` and `peak`: the suite's own proofs and probes, run by hand or by CI.

- `check isolation FOLDER`: a case measured alone against the same case after others.
- `check bareloop ...`: the suite's `single` step against a hand-written training loop (GPU).
- `check proof SEARCH... --against FILES`: a search's answer over the fastest row the call measured.
- `peak`: the chip's dense matrix rates, to set achieved TFLOP/s against (GPU).
"""
from __future__ import annotations

import argparse

from bench.cli.common import UsageError


def cmd_isolation(args) -> int:
    from bench.checks import isolation

    return isolation.main([args.folder])


def _needs_a_gpu(command: str) -> None:
    """A GPU-only command on a host where torch sees none: one line, not CUDA's traceback."""
    import torch

    if not torch.cuda.is_available():
        why = "is built without CUDA" if torch.version.cuda is None else "sees no CUDA device"
        raise UsageError(f"{command} runs on a GPU and this torch ({torch.__version__}) {why}: run it on a GPU host")


def cmd_bareloop(args) -> int:
    _needs_a_gpu("check bareloop")
    if args.variants:  # the hand loop alone, in each execution: the fastest it reaches
        from bench.checks import handloop

        handloop.run(args)
        return 0
    from bench.checks import bareloop

    bareloop.run(args)
    return 0


def cmd_proof(args) -> int:
    from bench.cases.fileio import ResultsError
    from bench.checks import proof

    try:
        return proof.main(args)
    except (ResultsError, proof.ProofError) as exc:
        raise UsageError(str(exc)) from None


def cmd_peak(args) -> int:
    _needs_a_gpu("peak")
    from bench.measure import peak

    peak.main(args.out)
    return 0


def add_parser(sub) -> None:
    check = sub.add_parser("check", help="the suite's own checks: isolation, bareloop")
    checks = check.add_subparsers(dest="check", required=True)
    iso = checks.add_parser("isolation", help="compare <strategy>-alone-<n>.json with <strategy>-after-<n>.json")
    iso.add_argument("folder")
    iso.set_defaults(func=cmd_isolation)
    bare = checks.add_parser("bareloop", help="the suite's single step against a hand-written loop (one GPU)")
    bare.add_argument("--model", default="resnet18")
    bare.add_argument("--batch", type=int, default=256)
    bare.add_argument("--precision", default="amp-fp16")
    bare.add_argument("--channels-last", action="store_true", help="channels_last images (a language model has none)")
    bare.add_argument("--warmup", type=int, default=10)
    bare.add_argument("--steps", type=int, default=30)
    bare.add_argument("--rounds", type=int, default=3)
    bare.add_argument("--optimizer-impl", "--sgd-impl", dest="optimizer_impl", choices=["for-loop", "foreach", "fused"],
                      default="foreach", help="the optimiser's kernels (SGD for images, AdamW for a language model)")
    bare.add_argument("--variants", help="eager,compile,compile-ro,graph: time the hand-written loop alone in each "
                      "execution and report the fastest per batch (bench/checks/handloop.py), instead of the "
                      "alternation with the suite's single")
    bare.add_argument("--batches", help="with --variants: per-GPU batch sizes, e.g. 256,1024,2048 (default --batch)")
    bare.add_argument("--out")
    bare.set_defaults(func=cmd_bareloop)
    prf = checks.add_parser("proof", help="each search's answer (largest device count and one device) over the fastest "
                            "row the same call measured; exit 1 below --min-ratio (scripts/answer_proof.sh)")
    prf.add_argument("searches", nargs="+", help="results files of `bench run --search`")
    prf.add_argument("--against", nargs="*", help="results files of the same call to search for the fastest row")
    prf.add_argument("--handloop", help="`check bareloop --variants ... --out` of the same call (one GPU)")
    prf.add_argument("--min-ratio", type=float, default=0.95, help="the share of the best an answer must reach")
    prf.add_argument("--out", help="write the table as JSON here")
    prf.set_defaults(func=cmd_proof)
    peak = sub.add_parser("peak", help="dense matrix TFLOP/s of GPU 0 (bf16, fp16, tf32, fp32)",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    peak.add_argument("--out", help="write the rates here (a *.probe.json beside results is read by the report)")
    peak.set_defaults(func=cmd_peak)
