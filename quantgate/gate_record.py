"""The keys of a gate record that the store itself reads: to let `release` move only to a version whose newest
decision passed (`artifacts.decisions`), the store reads the verdict and the criteria, and nothing else.

Spelled here, beneath both the gate stage (which writes them, `stages/gate/outputs.py`) and the store, so that
the store knows no stage.
"""

PASSED = "passed"
CRITERIA = "criteria"
