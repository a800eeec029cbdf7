import sys

try:
    from bench.cli import main

    status = main()
except KeyboardInterrupt:  # Ctrl-C while Python loads the command
    print("parabench: interrupted", file=sys.stderr)
    status = 130
sys.exit(status)
