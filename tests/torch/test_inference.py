"""Inference through torch.compile(backend="pyxla"): each model's output equals eager
PyTorch's on fresh seeded inputs."""
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from .conftest import assert_close  # noqa: E402


def run_both(model, *inputs, rtol=1e-4, atol=1e-5):
    """Compiled against eager, no graph falling back to eager."""
    import warnings
    model.eval()
    compiled = torch.compile(model, backend="pyxla")   # the entry point: no import of pyxla.torch needed
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        want = model(*inputs)
        got = compiled(*inputs)
    fallbacks = [str(w.message) for w in caught if type(w.message).__name__ == "PyxlaFallbackWarning"]
    assert not fallbacks
    assert_close(got, want, rtol=rtol, atol=atol)
    return compiled


def test_mlp(seed):
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.SiLU(), nn.Linear(32, 4),
                          nn.LogSoftmax(-1))
    run_both(model, torch.randn(8, 16))


def test_several_batch_sizes_through_one_model(seed):
    model = nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 3), nn.Softmax(-1)).eval()
    compiled = torch.compile(model, backend="pyxla")
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in (4, 7, 4, 16):
            x = torch.randn(batch, 12)
            assert_close(compiled(x), model(x))
    assert not [w for w in caught if type(w.message).__name__ == "PyxlaFallbackWarning"]


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 2 * 2, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.leaky_relu(self.bn2(self.conv2(x)), 0.1), 2)
        return self.fc(torch.flatten(x, 1))


def test_cnn_batch_norm_eval_and_pooling(seed):
    model = SmallCNN()
    for bn in (model.bn1, model.bn2):   # non-trivial running statistics
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    run_both(model, torch.randn(2, 3, 16, 16))


def test_max_pool_in_inference_computes_no_indices(seed):
    """max_pool2d_with_indices whose indices nothing reads is one max window (no s64 index
    planes); NaN wins a window as in eager PyTorch, and padding never does."""
    import pyxla.torch as pt

    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)).eval()
    module = pt.export(model, (torch.randn(2, 3, 11, 11),))
    windows = [i for i in module.entry.instructions if i.opcode == "reduce-window"]
    assert len(windows) == 1 and len(windows[0].operands) == 2   # one array and its init value
    x = -torch.rand(2, 3, 11, 11) - 1     # all-negative: a padded -inf must never win
    x[0, 1, 4, 5] = float("nan")
    pool = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
    want = pool(x)
    assert want.isnan().sum() == 2
    torch.testing.assert_close(torch.compile(pool, backend="pyxla")(x), want, rtol=0, atol=0, equal_nan=True)


def test_batch_norm_eval_without_affine_parameters(seed):
    model = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6, affine=False), nn.ReLU())
    model[1].running_mean.uniform_(-0.5, 0.5)
    model[1].running_var.uniform_(0.5, 2.0)
    run_both(model, torch.randn(2, 3, 8, 8))


def test_transformer_encoder_layer(seed):
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.1, batch_first=True)
    run_both(layer, torch.randn(2, 6, 32), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_layer_fast_path_as_two_dimensional_products(seed, norm_first, tmp_path, monkeypatch):
    """The eval fast path (_transformer_encoder_layer_fwd) with GELU, post- and pre-norm:
    its four weight products are 2-D dots over the tokens (bias and activation then fuse
    into them), and the values are eager PyTorch's."""
    from pyxla.hlo import parse_module
    from pyxla.torch.ops.registry import LOWERINGS

    key = "_transformer_encoder_layer_fwd.default"
    lowered = []
    fast_path = LOWERINGS[key]
    monkeypatch.setitem(LOWERINGS, key, lambda *a, **k: lowered.append(key) or fast_path(*a, **k))
    monkeypatch.setenv("PYXLA_DUMP", str(tmp_path))
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True,
                                       activation="gelu", norm_first=norm_first)
    run_both(layer, torch.randn(3, 5, 32), rtol=1e-4, atol=2e-5)
    assert lowered == [key]
    (traced,) = tmp_path.glob("*/000.input.hlo")
    module = parse_module(traced.read_text())
    products = [i for c in module.computations for i in c.instructions if i.opcode == "dot"]
    assert sorted(i.array_shape.dims for i in products if i.array_shape.rank == 2) == \
        [(15, 32), (15, 32), (15, 64), (15, 96)]


def test_lstm(seed):
    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(8, 12, batch_first=True)
            self.out = nn.Linear(12, 3)

        def forward(self, x):
            h, _ = self.lstm(x)
            return self.out(h)
    run_both(Tagger(), torch.randn(2, 5, 8))


def test_embedding_and_pooling(seed):
    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.fc = nn.Linear(16, 4)

        def forward(self, ids):
            return self.fc(self.emb(ids).mean(1)) + self.emb(ids).amax(1)[:, :4]
    run_both(Bag(), torch.randint(0, 50, (3, 7)))


def test_grouped_depthwise_conv_upsample_cat(seed):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=2)
            self.depthwise = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8)
            self.gn = nn.GroupNorm(4, 8)

        def forward(self, x):
            a = F.elu(self.gn(self.grouped(x)))
            b = F.hardtanh(self.depthwise(x))
            up = F.interpolate(a, scale_factor=2, mode="nearest")
            bil = F.interpolate(b, scale_factor=2, mode="bilinear", align_corners=False)
            return torch.cat([up, bil, F.softplus(up)], dim=1)
    run_both(Net(), torch.randn(2, 8, 6, 6))


def test_causal_scaled_dot_product_attention(seed):
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    got = torch.compile(attend, backend="pyxla")(q, k, v)
    assert_close(got, attend(q, k, v))


def test_data_dependent_branch(seed):
    def f(x, w):
        y = torch.tanh(x @ w)
        if y.sum() > 0:     # a graph break: two compiled graphs and Python between them
            return torch.sigmoid(y) * 2
        return torch.relu(y) - 1
    compiled = torch.compile(f, backend="pyxla")
    w = torch.randn(6, 6)
    for _ in range(3):
        x = torch.randn(4, 6)
        assert_close(compiled(x, w), f(x, w))
    assert_close(compiled(-x, w), f(-x, w))


def test_float64_int64_bool(seed):
    def f(x, ids, mask):
        picked = x[ids]                                  # index.Tensor
        total = torch.cumsum(picked, 0) + ids.unsqueeze(1).to(x.dtype)
        return torch.where(mask, total, -total).sum(0), torch.argmax(total, 1), (total > 0).any(1)
    x = torch.randn(10, 4, dtype=torch.float64)
    ids = torch.randint(0, 10, (6,))
    mask = torch.rand(6, 4) > 0.5
    got, want = torch.compile(f, backend="pyxla")(x, ids, mask), f(x, ids, mask)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_topk_sort_gather_scatter(seed):
    def f(x, idx):
        values, indices = torch.topk(x, 3, dim=1)
        s, order = torch.sort(x, dim=0, descending=True)
        g = torch.gather(x, 1, idx)
        sc = torch.zeros_like(x).scatter_add(1, idx, g)
        return values, indices, s, order, g, sc, x.var(0), x.amin(1)
    x = torch.randn(5, 8)
    idx = torch.randint(0, 8, (5, 3))
    got, want = torch.compile(f, backend="pyxla")(x, idx), f(x, idx)
    for g, w in zip(got, want):
        assert_close(g, w)
