"""The case protocol every case kind runs through, and the kernel case kind (the draft loop and tensor
parallel kinds are in `perfsuite.draft` and `perfsuite.distributed`)."""
