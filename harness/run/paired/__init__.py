"""Paired rechecks: the baseline's code and this run's measured alternately, in two workers.

:mod:`.pairing` (whether a recheck pairs, and why), :mod:`.baseline_code` (the baseline's
code tree: given, this checkout, or exported, checked by fingerprint), :mod:`.workers`
(the two worker processes and their alternation), :mod:`.coordinator` (what a run or a
recheck calls and reads back). The worker itself is :mod:`harness.run.paired_worker`:
it runs inside the baseline's tree, so its module path is a contract with older trees.
"""
