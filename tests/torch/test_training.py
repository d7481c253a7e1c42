"""Training through torch.compile(backend="pyxla"): loss.backward() on the compiled model
gives every parameter the gradient eager PyTorch gives, over several optimizer steps."""
import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from .conftest import assert_close  # noqa: E402


def train_both(model, batches, steps=3, rtol=1e-4, atol=1e-5):
    """Runs `steps` SGD steps on an eager copy and a compiled copy; gradients, losses and
    (at the end) parameters and buffers agree, and no graph fell back to eager."""
    eager = model
    mine = copy.deepcopy(model)
    compiled = torch.compile(mine, backend="pyxla")
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt_c = torch.optim.SGD(mine.parameters(), lr=0.05, momentum=0.9)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(steps):
            x, y = batches(step)
            for net, opt, m in ((eager, opt_e, eager), (compiled, opt_c, mine)):
                opt.zero_grad()
                loss = F.cross_entropy(net(x), y)
                loss.backward()
                m.last_loss = loss.detach()
            assert_close(mine.last_loss, eager.last_loss, rtol=rtol, atol=atol)
            for (name, p), q in zip(eager.named_parameters(), mine.parameters()):
                assert q.grad is not None, name
                assert_close(q.grad, p.grad, rtol=rtol, atol=atol)
            opt_e.step()
            opt_c.step()
    fallbacks = [str(w.message) for w in caught if type(w.message).__name__ == "PyxlaFallbackWarning"]
    assert not fallbacks
    for a, b in zip(eager.state_dict().values(), mine.state_dict().values()):
        assert_close(b, a, rtol=rtol, atol=atol)


def test_mlp_training(seed):
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 5))
    data = [(torch.randn(16, 20), torch.randint(0, 5, (16,))) for _ in range(3)]
    train_both(model, lambda i: data[i])


def test_cnn_training_with_batch_norm(seed):
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), nn.BatchNorm2d(8), nn.SiLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(8 * 2 * 2, 4))
    model.train()
    data = [(torch.randn(4, 3, 16, 16), torch.randint(0, 4, (4,))) for _ in range(3)]
    train_both(model, lambda i: data[i], rtol=1e-4, atol=2e-5)


def test_layer_norm_embedding_training(seed):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(30, 16)
            self.norm = nn.LayerNorm(16)
            self.fc = nn.Linear(16, 3)

        def forward(self, ids):
            h = torch.tanh(self.norm(self.emb(ids)))
            return self.fc(F.softplus(h).mean(1) + F.sigmoid(h).amax(1))
    data = [(torch.randint(0, 30, (6, 5)), torch.randint(0, 3, (6,))) for _ in range(2)]
    train_both(Net(), lambda i: data[i], steps=2)
