"""What a store holds beside the activations: the run registry, weights, training
checkpoints, analysis results, and removing any of them (``layerstate forget``).

Imports nothing itself: import the modules (``from store.contents.runs import same_run``).
"""
