"""PyTorch eager (NAME "torch") and torch.compile ("torch_compile"), CPU, float32, no grad
(except mlp_train and cnn_train, which take gradients with autograd)."""
import numpy as np

NAME = "torch"


def version() -> str:
    import torch
    return torch.__version__


def functions():
    import torch
    import torch.nn.functional as F

    def attention(x, wq, wk, wv, wo):
        b, s, d = x.shape
        heads, hd = 8, d // 8

        def split(t):
            return t.reshape(b, s, heads, hd).transpose(1, 2)

        q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
        p = torch.softmax(q @ k.transpose(-1, -2) / float(np.sqrt(hd)), dim=-1)
        return (p @ v).transpose(1, 2).reshape(b, s, d) @ wo

    def cnn(x, w, b):   # NHWC data, computed in torch's NCHW
        y = F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), b, padding=1)
        return F.max_pool2d(F.relu(y), 2).permute(0, 2, 3, 1)

    return {
        "sum_fma": lambda x, y, z: torch.sum(x + y * z),
        "gelu": lambda x: F.gelu(x, approximate="tanh"),
        "softmax": lambda x: torch.softmax(x, dim=-1),
        "layer_norm": lambda x, g, b: F.layer_norm(x, x.shape[-1:], g, b, eps=1e-5),
        "mlp": lambda x, w1, b1, w2, b2: F.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2,
        "attention": attention,
        "cnn_block": cnn,
        "dispatch": lambda x, y: x + y,
    }


def make_builders(compiled: bool):
    def build_for(name):
        def build(ins):
            import torch
            f = functions()[name]
            if compiled:
                f = torch.compile(f, **_backend(compiled))
            args = [torch.from_numpy(a) for a in ins]

            def run():
                with torch.no_grad():
                    return f(*args).numpy()
            return run
        return build
    builders = {name: build_for(name) for name in
                ("sum_fma", "gelu", "softmax", "layer_norm", "mlp", "attention", "cnn_block", "dispatch")}
    builders["mlp_train"] = lambda ins: build_train(ins, compiled, _mlp_loss)
    builders["cnn_train"] = lambda ins: build_train(ins, compiled, _cnn_loss)
    return builders


def _mlp_loss(x, w1, b1, w2, b2, labels):
    import torch
    logits = torch.tanh(x @ w1 + b1) @ w2 + b2
    return -(labels * torch.log_softmax(logits, dim=-1)).sum(-1).mean()


def _cnn_loss(x, w, b, wd, bd, labels):
    import torch
    pooled = functions()["cnn_block"](x, w, b)   # NHWC, so the flattening order is the others'
    logits = pooled.reshape(pooled.shape[0], -1) @ wd + bd
    return -(labels * torch.log_softmax(logits, dim=-1)).sum(-1).mean()


def build_train(ins, compiled: bool, loss_fn):
    """Loss and gradients of the four parameters (inputs 1-4; input 0 is the data, input 5 the
    labels). Eager: autograd, `loss.backward()` and the parameters' `.grad` read. Compiled:
    torch.compile of a step computing the loss and calling `torch.autograd.grad`."""
    import torch
    x, *weights, labels = (torch.from_numpy(a) for a in ins)
    params = [p.clone().requires_grad_() for p in weights]

    if compiled:
        @torch.compile(**_backend(compiled))
        def step(x, p0, p1, p2, p3, labels):
            loss = loss_fn(x, p0, p1, p2, p3, labels)
            return (loss, *torch.autograd.grad(loss, (p0, p1, p2, p3)))

        def run():
            return tuple(t.detach().numpy() for t in step(x, *params, labels))
        return run

    def run():
        for p in params:
            p.grad = None
        loss = loss_fn(x, *params, labels)
        loss.backward()
        return (loss.detach().numpy(), *(p.grad.numpy() for p in params))
    return run


def _backend(compiled) -> dict:
    """torch.compile's arguments: compiled=True is inductor, a string names another backend."""
    return {"backend": compiled} if isinstance(compiled, str) else {}


BUILDERS = make_builders(compiled=False)
