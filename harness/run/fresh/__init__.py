"""Fresh-process cells: a first load or first product as a user's one-shot script feels it.

:mod:`.child` is the script a fresh interpreter runs (it imports only quantem);
:mod:`.process` spawns it and turns its marks into cells (io-scale's first-load cells);
:mod:`.first_call` adds the peers' one-shot scripts beside ours (compute's first calls).
"""
