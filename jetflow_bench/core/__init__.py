"""The utilities every layer shares and that import nothing else of the project: the one error
type, device and thread settings, the generic plug-in registry, arm names, hashing of records,
weight fingerprints, FLOP formulas, the draft budget and its policy, acceptance calibration bins
and the progress display."""
