"""The ops, one module each: everything Python knows about an op, over
fused_ops_py._core, in four parts. The raw calls: a signature's checks and
argument struct made once; a call fills in the addresses and calls the
library. The autograd.Function. The op registered for torch.compile, with
its fake. The public functions, which take the registered op while dynamo
traces, the Function when a gradient is wanted, else the raw call."""
