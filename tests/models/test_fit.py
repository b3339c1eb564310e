"""Training entry point and generic trainer: split, batches, early stopping, checkpoints,
determinism, the collapse check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dprm
from dprm.config import ConfigError
from dprm.data import read_calibration_set
from dprm.models import REGISTRY
from dprm.models.fit import (
    POINT_MASS_CONTRADICTION,
    POINT_MASS_SHARE,
    POINT_MASS_TAIL,
    CollapseError,
    binomial_upper_tail,
    check_collapse,
    fit,
)
from dprm.models.interface import Calibrator, PointMass
from dprm.models.mono import MonoCalibrator
from dprm.models.qr import QRCalibrator, QRConfig
from dprm.models.training import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")


FAST = {"max_steps": "60", "eval_every": "20", "warmup_steps": "20", "batch_size": "64"}


@pytest.fixture(scope="module")
def world(tiny_world):
    return read_calibration_set(tiny_world("llama-3.2-1b__qwen-prm")["id/calib"])


def halves(data):
    rows = np.arange(len(data))
    return data.subset(rows[rows % 5 != 0]), data.subset(rows[rows % 5 == 0])


def make_constant(model):
    """Turn a quantile-map calibrator into the map T = 0 for every tau and h."""
    net = model.net
    with torch.no_grad():
        net.marginal_scale.bias.fill_(-60.0)
        net.picnn.curvature.bias.fill_(-60.0)
        for layer in [*net.picnn.layers, net.picnn.output]:
            layer.x_coefficient.weight.zero_()
            layer.x_coefficient.bias.zero_()
    return model


def test_batches_cover_each_epoch_and_streaming_equals_preloaded(world):
    train, val = halves(world)
    config = QRConfig(batch_size=32)
    model = QRCalibrator(world.hidden_dim, vars(config))
    preloaded = Trainer(model, train, val, config, seed=5, progress=False)
    assert preloaded.train_rows.matrix is not None
    streaming_config = QRConfig(batch_size=32, preload_max_gb=0.0)
    streaming = Trainer(
        QRCalibrator(world.hidden_dim, vars(config)),
        train,
        val,
        streaming_config,
        seed=5,
        progress=False,
    )
    assert streaming.train_rows.matrix is None
    per_epoch = len(train) // 32
    seen = []
    for a, b, _ in zip(preloaded.batches(), streaming.batches(), range(per_epoch), strict=False):
        assert a.hidden.shape == (32, world.hidden_dim) and a.hidden.dtype == torch.float32
        torch.testing.assert_close(a.hidden, b.hidden, rtol=1e-6, atol=1e-5)
        assert torch.equal(a.tau, b.tau) and torch.equal(a.target, b.target)
        assert ((a.tau >= 0) & (a.tau < 1)).all()
        seen.append(a.rows)
    seen = np.concatenate(seen)
    assert len(np.unique(seen)) == len(seen) == per_epoch * 32  # no row twice in an epoch
    # standardised with the training statistics
    full = preloaded.train_rows[np.arange(len(train))]
    assert full.mean(0).abs().max() < 1e-3 and (full.std(0) - 1).abs().max() < 1e-2


def test_input_layer_learning_rate_is_scaled(world):
    train, val = halves(world)
    config = QRConfig(lr=1e-3, input_lr_scale=0.25)
    model = QRCalibrator(world.hidden_dim, vars(config))
    trainer = Trainer(model, train, val, config, seed=0, progress=False)
    opt, _ = trainer.optimizer(model.parameters())
    lrs = {id(p): group["lr"] for group in opt.param_groups for p in group["params"]}
    assert lrs[id(model.head.weight)] == pytest.approx(2.5e-4)
    assert lrs[id(model.head.bias)] == pytest.approx(1e-3)


def test_patience_stops_early_and_best_checkpoint_is_restored(world):
    train, val = halves(world)
    config = QRConfig(
        eval_every=1,
        patience=3,
        patience_fraction=0.0,
        warmup_steps=0,
        min_delta=0.0,
        max_steps=50,
    )
    model = QRCalibrator(world.hidden_dim, vars(config))
    trainer = Trainer(model, train, val, config, seed=0, progress=False)
    model.init_marginal(trainer.target.numpy())
    good = {k: v.clone() for k, v in model.state_dict().items()}

    def step(batch, index):
        with torch.no_grad():  # step 1 keeps the marginal map, later steps ruin it
            if index == 1:
                model.head.bias.add_(1e-3)
            else:
                model.head.bias.fill_(-20.0 + index)
        return {"loss": float(index)}

    history = trainer.run(step)
    # step 1 ties or beats the init; steps 2, 3, ... are worse: patience 3 ends it at step 3 or 4
    best = trainer.summary["best_step"]
    assert best in (0, 1) and trainer.summary["stopped_early"]
    assert trainer.summary["steps"] == best + 3
    assert [h["step"] for h in history] == list(range(best + 4))
    assert torch.allclose(model.head.bias, good["head.bias"], atol=2e-3)
    assert history[1]["loss"] == 1.0 and "calibration_area" in history[1]


def test_warmup_checkpoints_are_not_eligible(world):
    train, val = halves(world)
    config = QRConfig(
        eval_every=5, warmup_steps=10, warmup_fraction=1.0, max_steps=20, patience=100
    )
    model = QRCalibrator(world.hidden_dim, vars(config))
    trainer = Trainer(model, train, val, config, seed=0, progress=False)
    trainer.fit_loss(QRCalibrator.loss)
    assert trainer.summary["best_step"] >= 10 and trainer.summary["eligible_from"] == 10


def test_the_warmup_is_scaled_to_the_step_cap_and_the_minimum_is_recorded(world):
    from dprm.models.training import eligible_from

    assert eligible_from(QRConfig(warmup_steps=400, max_steps=600)) == 150  # the demo's cap
    assert eligible_from(QRConfig(warmup_steps=400, max_steps=2000)) == 400  # long runs: as was
    assert eligible_from(QRConfig(warmup_steps=0, max_steps=600)) == 0
    train, val = halves(world)
    config = QRConfig(eval_every=5, warmup_steps=400, max_steps=40, patience=100)
    model = QRCalibrator(world.hidden_dim, vars(config))
    trainer = Trainer(model, train, val, config, seed=0, progress=False)
    history = trainer.fit_loss(QRCalibrator.loss)
    summary = trainer.summary
    assert summary["eligible_from"] == 10 and summary["best_step"] >= 10  # not 400: the cap
    scores = {h["step"]: h["calibration_area"] for h in history}
    low = min(scores, key=scores.get)
    assert summary["validation_min_step"] == low
    assert summary["validation_min_score"] == scores[low] <= summary["best_score"]
    # qr dates its last improvement by the WQL beside its calibration area as well
    wql = {h["step"]: h["wql"] for h in history}
    assert summary["proper_score"] == "wql" and summary["proper_min_step"] == min(wql, key=wql.get)


def test_fit_is_deterministic_and_records_info(world):
    a = fit("mono", world, overrides=FAST, seed=3, progress=False)
    b = fit("mono", world, overrides=FAST, seed=3, progress=False)
    c = fit("mono", world, overrides=FAST, seed=4, progress=False)
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key]), key
    assert any(not torch.equal(v, c.state_dict()[k]) for k, v in a.state_dict().items())
    info = a.info
    assert info["seed"] == 3 and info["method"] == "mono"
    assert info["config"]["max_steps"] == 60
    # the fixture has <= 50 training questions: the small-data defaults apply under --set
    assert info["n_train_questions"] <= 50 and info["config"]["context_hidden"] == [16]
    assert info["small_data"]["defaults"]["weight_decay"] == 1e-3
    assert info["dprm_version"] == dprm.__version__
    assert info["data_path"] == str(world.path)
    assert info["n_train"] + info["n_val"] == len(world)
    assert info["collapse"]["collapsed"] is False
    assert info["training"]["steps"] == 60
    assert a.history[0]["step"] == 0 and a.history[-1]["step"] == 60


def test_fit_errors_and_base(world):
    with pytest.raises(ConfigError, match="unknown method"):
        fit("nope", world)
    with pytest.raises(ConfigError, match="unknown key"):
        fit("mono", world, overrides={"learning_rate": "1"})
    with pytest.raises(ConfigError, match="no hyper-parameters"):
        fit("base", world, overrides={"lr": "1"})
    base = fit("base", world, progress=False)
    assert base.kind == "point" and base.history == []


def test_check_collapse_fires_on_constant_map_only(world):
    train, val = halves(world)
    model = MonoCalibrator(world.hidden_dim)
    model.standardizer.fit(np.asarray(train.hidden))
    model.net.init_marginal(train.records["success_prob"].to_numpy())
    healthy = check_collapse(model, val)
    assert not healthy["collapsed"] and healthy["tau_spread"] > healthy["threshold"]
    report = check_collapse(make_constant(model), val)
    assert report["collapsed"] and report["tau_spread"] < 1e-9 and report["h_spread"] < 1e-9
    with torch.no_grad():
        model.net.marginal_scale.bias.fill_(float("nan"))
    assert check_collapse(model, val)["collapsed"]


class MostlyPointMass(Calibrator):
    """A distribution that is the point mass at 0 for the 70 % of rows with the smallest h[:, 0]
    and at 0.9 elsewhere: it varies with h, so it is not flat in tau *and* h."""

    kind = "distribution"

    def __init__(self, hidden_dim: int, cut: float):
        super().__init__(hidden_dim)
        self.cut = cut

    def forward(self, hidden, prm_score=None):
        return PointMass(torch.where(hidden[:, 0].float() < self.cut, 0.0, 0.9))

    @classmethod
    def fit_model(cls, train, val, config, seed, progress):
        raise NotImplementedError("a fixed test double")


def test_check_collapse_flags_a_point_mass_at_0_or_1_for_most_h(world):
    _, val = halves(world)
    cut = float(np.quantile(np.asarray(val.hidden, np.float32)[:, 0], 0.7))
    report = check_collapse(MostlyPointMass(world.hidden_dim, cut), val)
    # The old rule alone passes it: flat in tau but not in h.
    assert report["h_spread"] > report["threshold"]
    assert report["collapsed"] and report["point_mass_share"] == pytest.approx(0.7, abs=0.02)
    assert report["point_mass_contradiction"] > POINT_MASS_CONTRADICTION, report
    # A point mass on fewer than half of the rows is a legitimate, confident map.
    cut = float(np.quantile(np.asarray(val.hidden, np.float32)[:, 0], 0.3))
    assert not check_collapse(MostlyPointMass(world.hidden_dim, cut), val)["collapsed"]


class Oracle(Calibrator):
    """A point mass at each row's own label: confident everywhere and never contradicted."""

    kind = "distribution"

    def __init__(self, hidden_dim: int, labels: np.ndarray):
        super().__init__(hidden_dim)
        self.labels = torch.as_tensor(labels, dtype=torch.float32)
        self.row = 0

    def forward(self, hidden, prm_score=None):
        out = self.labels[self.row : self.row + len(hidden)]
        self.row += len(hidden)
        return PointMass(out)

    @classmethod
    def fit_model(cls, train, val, config, seed, progress):
        raise NotImplementedError("a fixed test double")


def test_check_collapse_passes_a_confident_map_the_labels_agree_with(world):
    """Mostly 0/1 labels (as in real data) and a map that is a point mass at them: not a collapse."""
    _, val = halves(world)
    y = val.records["success_prob"].to_numpy()
    labels = np.where(np.arange(len(y)) % 10 < 7, 0.0, y)  # 70 % of the labels at 0
    val.records["success_prob"] = labels.astype(np.float32)
    report = check_collapse(Oracle(world.hidden_dim, labels), val, max_rows=len(y))
    assert report["point_mass_share"] > POINT_MASS_SHARE
    assert report["point_mass_contradiction"] == 0.0 and not report["collapsed"]


def test_binomial_upper_tail_by_hand():
    k, n = np.array([0, 1, 1, 2, 3, 16]), np.array([4, 16, 1, 4, 16, 16])
    expected = [
        1.0,  # P(K >= 0)
        1 - 0.96**16,  # at least one success in 16
        0.04,  # a single rollout
        1 - 0.96**4 - 4 * 0.04 * 0.96**3,
        1 - 0.96**16 - 16 * 0.04 * 0.96**15 - 120 * 0.04**2 * 0.96**14,
        0.04**16,
    ]
    np.testing.assert_allclose(binomial_upper_tail(k, n, 0.04), expected, rtol=1e-9, atol=1e-30)
    assert binomial_upper_tail(np.array([], int), np.array([], int), 0.04).shape == (0,)


@pytest.mark.parametrize(("true_prob", "collapsed"), [(0.03, False), (0.3, True)])
def test_check_collapse_judges_a_point_mass_by_how_unlikely_its_labels_are(
    world, true_prob, collapsed
):
    """A map sure that 70 % of the prefixes fail, labelled by 16 rollouts each: when those
    prefixes succeed 3 % of the time, more than a third of them still show a success (the old
    "any success" rule called that a collapse); when they succeed 30 % of the time, the map is wrong."""
    _, val = halves(world)
    rng = np.random.default_rng(0)
    hopeless = np.arange(len(val)) % 10 < 7
    successes = np.where(hopeless, rng.binomial(16, true_prob, len(val)), 16)
    val.records["n_rollouts"] = 16
    val.records["success_prob"] = (successes / 16).astype(np.float32)
    labels = np.where(hopeless, 0.0, 1.0)
    report = check_collapse(Oracle(world.hidden_dim, labels), val, max_rows=len(val))
    assert report["point_mass_share"] == 1.0 and report["collapsed"] is collapsed
    if not collapsed:
        assert np.mean(successes[hopeless] > 0) > POINT_MASS_CONTRADICTION
        assert report["point_mass_contradiction"] < POINT_MASS_TAIL
    else:
        assert report["point_mass_contradiction"] > 0.5


def test_fit_raises_on_collapse(world, monkeypatch):
    cls = REGISTRY["mono"]
    original = cls.fit_model.__func__

    def collapsing(klass, train, val, config, seed, progress):
        model, history = original(klass, train, val, config, seed, progress)
        return make_constant(model), history

    monkeypatch.setattr(cls, "fit_model", classmethod(collapsing))
    with pytest.raises(CollapseError, match="collapsed"):
        fit("mono", world, overrides=FAST, progress=False)
    # under the do-no-harm rule the raw score stands in, and says why
    model = fit("mono", world, overrides=FAST, progress=False, seed=3, do_no_harm=True)
    assert model.method == "base" and model.info["seed"] == 3
    record = model.info["do_no_harm"]
    assert record["fell_back"] and record["fitted_method"] == "mono"
    assert record["reason"].startswith("collapse: mono (seed 3) collapsed")
    assert CollapseError.refusal  # dprm run lists such a unit as refused, not failed


def test_top_level_api_is_lazy():
    import subprocess
    import sys

    import dprm.models.fit
    from dprm.models.storage import load

    code = "import sys, dprm; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert dprm.fit is dprm.models.fit.fit and dprm.load is load
    with pytest.raises(AttributeError):
        dprm.no_such_name  # noqa: B018


def test_nan_loss_and_unknown_select_metric_fail_loudly(world):
    train, val = halves(world)
    config = QRConfig(max_steps=5, eval_every=1)
    model = QRCalibrator(world.hidden_dim, vars(config))
    trainer = Trainer(model, train, val, config, seed=0, progress=False)
    with pytest.raises(FloatingPointError, match="loss = nan at step 3"):
        trainer.run(lambda batch, step: {"loss": float("nan") if step == 3 else 0.0})
    bad = Trainer(model, train, val, QRConfig(select_metric="brier"), seed=0, progress=False)
    with pytest.raises(ValueError, match="select_metric 'brier'"):
        bad.run(lambda batch, step: {})
