import sys
from pathlib import Path

# scripts/fuzz puts scripts/ on the path to import the `fuzzing` package; so do the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
