"""The flags that several commands share, declared once: what to measure (models, strategies,
precisions), on which GPUs, where the results go (the file, the folder, resuming), and how
much to measure, its defaults from the one table of bench/cases/defaults.py."""
from __future__ import annotations

from bench.cli.common import RESULTS_DIR, UsageError
from bench.cases.defaults import MEASUREMENT, said, sweep_default


def what(parser, models: str, strategies: str) -> None:
    """--models, --strategies, --precisions: the models' default and the strategies' help are the
    command's; the precisions' default is the table's (bench/cases/defaults.py SWEEP)."""
    parser.add_argument("--models", default=models, help="built-in (resnet18-small, resnet18, vit-large), timm:NAME, "
                        f"torchvision:NAME or package.module:factory (default {models}; `list --models` shows them)")
    parser.add_argument("--strategies", help=strategies)
    parser.add_argument("--precisions", help=f"fp32,amp-fp16,amp-bf16,apex-O1,apex-O2 (default {said('precisions')})")


def precisions(args, on_gpu: bool) -> list[str]:
    """--precisions, checked; the table's default on this device where not given."""
    from bench.cli.common import check_names, listed
    from bench.core.precision import PRECISIONS

    return check_names(listed(args.precisions, "--precisions") or [sweep_default("precisions", on_gpu)],
                       list(PRECISIONS), "precision", "--precisions")


def gpus(parser, help: str = "CUDA ordinals, e.g. 0,1 (default: all visible; '' or cpu: the CPU)") -> None:
    parser.add_argument("--gpus", help=help)


def output(parser, file: str, resume: str | None = None) -> None:
    """--out (what `file` says), --results-dir, and --resume where the command resumes."""
    parser.add_argument("--out", help=file)
    parser.add_argument("--results-dir", default=str(RESULTS_DIR), help="folder for a new file (default results/)")
    if resume:
        parser.add_argument("--resume", action="store_true", help=resume)


def oversubscribe(parser, help: str) -> None:
    parser.add_argument("--oversubscribe", action="store_true", help=help)


def measurement(parser, command: str) -> None:
    """The command's measurement flags, their defaults said from MEASUREMENT."""
    for name, ((on_gpu, on_cpu), _, help) in MEASUREMENT[command].items():
        said = f"{on_gpu}" if on_gpu == on_cpu else f"{on_gpu} on GPUs, {on_cpu} on the CPU"
        parser.add_argument(f"--{name}", type=int, help=f"{help} (default {said})")


# The most any measurement flag takes: past it one case runs for days.
MOST = {"trials": 1000}
MOST_DEFAULT = 100_000


def measured(args, command: str, on_gpu: bool) -> dict:
    """The command's measurement settings: what was given, else MEASUREMENT's default here;
    below a flag's least or above its most, one line."""
    out = {}
    for name, ((gpu_default, cpu_default), least, _) in MEASUREMENT[command].items():
        value = getattr(args, name)
        value = (gpu_default if on_gpu else cpu_default) if value is None else value
        if value < least:
            raise UsageError(f"--{name} must be at least {least}, got {value}")
        most = MOST.get(name, MOST_DEFAULT)
        if value > most:
            raise UsageError(f"--{name} must be at most {most:,}, got {value}")
        out[name] = value
    return out
