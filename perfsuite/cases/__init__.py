"""The case kinds (registered in `perfsuite.core.kinds`): the protocol every kind's runner follows
(`protocol`), and one module or folder per kind: `kernel`, `tensor_parallel`, `draft`."""
