"""The one-conv sliced problem that the slicing tests compute by hand."""

from __future__ import annotations

from cimsplit.passes.placement.problem import PlacementProblem, SliceOption

KS = SliceOption(kind="ks", split=256, t_host_ns=500.0, t_cim_ns=300.0, crossbars=2, t_join_ns=50.0,
                 t_back_ns=40.0, t_graph_in_ns=100.0)


def one_conv(**changes) -> PlacementProblem:
    """input --(100 ns to the CIM)--> conv (host 1000, CIM 400, 4 crossbars; KS: 2) --(100 ns)--> output"""
    values = dict(names=("conv",), t_host_ns=(1000.0,), t_cim_ns=(400.0,), crossbars=(4,), edges=(), budget=2,
                  t_in_ns=(100.0,), t_out_ns=(100.0,), writes_output=(True,), slicings=((KS,),))
    return PlacementProblem(**{**values, **changes})
