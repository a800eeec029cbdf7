"""The measurement behind bench/fit/comm-memory.jsonl (the reserve the fit ships), kept runnable as it was run:
    torchrun --standalone --nproc-per-node N scripts/comm_memory.py
It lives in bench/fit/comm_memory.py, which bench fit runs itself (bench/fit/reserve.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fit.comm_memory import main  # noqa: E402

if __name__ == "__main__":
    main()
