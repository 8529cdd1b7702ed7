"""The cost model: step-cost tables (`costs`, packaged in specfsm/data/costs) and the
acceptance model (`acceptance`: draft shapes and accept lengths). Pure Python, no numpy."""
