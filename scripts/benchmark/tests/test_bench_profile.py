from benchmark.profile import summarize_pyspy

RAW = """\
run (serve.py:65);_run_once (base_events.py:1922);append (segment.py:252) 30
run (serve.py:65);_run_once (base_events.py:1922);select (polling.py:49) 10
run (serve.py:65);walk (records.py:251) 10
"""


def test_summary_ranks_self_and_inclusive_samples() -> None:
    text = summarize_pyspy(RAW)
    assert text.startswith("py-spy: 50 samples of running threads")
    own, inclusive = text.split("-- inclusive:")
    assert own.splitlines()[2] == "  60.0 %  append (segment.py:252)"
    assert "  20.0 %  walk (records.py:251)" in own
    assert inclusive.splitlines()[1] == " 100.0 %  run (serve.py:65)"
    assert "  80.0 %  _run_once (base_events.py:1922)" in inclusive


def test_no_samples_says_so() -> None:
    assert summarize_pyspy("") == "py-spy: no samples"
