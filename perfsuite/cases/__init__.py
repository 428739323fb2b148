"""The case kinds: their registry (`kinds`), the protocol every kind's runner follows, and the kernel kind
(the draft loop and tensor-parallel kinds' parts are in `perfsuite.draft` and `perfsuite.distributed`)."""
