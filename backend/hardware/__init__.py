"""The device layer: the only code that knows neuron, cuda or cpu (device, counters, compile errors,
caches, the environment set before torch loads, which NeuronCores each process owns, neuron-ls)."""
