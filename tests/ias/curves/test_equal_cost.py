"""Equal-cost rows (dprm.ias.curves.equal_cost): reading a peer's curve at a target cost."""

import numpy as np
import pytest

from dprm.ias.curves.equal_cost import curve_mixture
from dprm.ias.peers.curves import Curve


def test_a_curve_is_read_at_a_cost_as_the_mixture_of_its_neighbouring_levels():
    # two questions, three knob levels (given out of cost order): mean draws 1, 3, 2
    curve = Curve(
        "peer",
        np.array([0.0, 2.0, 1.0]),
        accuracy=np.array([[0.0, 0.2], [1.0, 1.0], [0.5, 0.6]]),
        draws=np.array([[1.0, 1.0], [3.0, 3.0], [2.0, 2.0]]),
    )
    acc, se, cost = curve_mixture(curve, 2.5, n_max=10)
    per_question = np.array([0.75, 0.8])  # half of level "2 draws", half of level "3 draws"
    assert acc == pytest.approx(per_question.mean())
    assert se == pytest.approx(per_question.std(ddof=1) / np.sqrt(2))
    assert cost == pytest.approx(0.25)
    assert curve_mixture(curve, 1.0, n_max=10)[0] == pytest.approx(0.1)  # the first level
    assert all(np.isnan(curve_mixture(curve, 3.5, n_max=10)))  # beyond the curve's range
