# On PYTHONPATH for an A/B probe only (scripts/campaign7_probe.sh): workers started with it
# never freeze their heap (bench/worker.py reset_between_cases), everything else unchanged.
import gc

gc.freeze = lambda: None
