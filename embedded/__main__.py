"""``python -m embedded`` writes the random-weight tiny pipeline; ``python -m embedded train`` trains
the scene model (``embedded.recipe.main``)."""

from embedded.recipe import main

main()
