import sys
from pathlib import Path

# scripts/bench puts scripts/ on the path to import the `benchmark` package; so do the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
