"""`jfbench bench ...`: harnesses that time one piece at a time (the drafting split, the AR
baseline against other engines, attention kernels, compile times), each pairing what it compares
in one session."""
