"""onnxruntime on models exported from the PyTorch version of each workload; no training
workloads (mlp_train, cnn_train): the suite reports them as unsupported here."""
import io

NAME = "onnxruntime"


def version() -> str:
    import onnxruntime
    return onnxruntime.__version__


def _build(name):
    def build(ins):
        import onnxruntime as ort
        import torch

        from .torch_impl import functions

        fn = functions()[name]

        class Wrapped(torch.nn.Module):
            def forward(self, *args):
                return fn(*args)

        buffer = io.BytesIO()
        args = tuple(torch.from_numpy(a) for a in ins)
        torch.onnx.export(Wrapped(), args, buffer, dynamo=False, opset_version=17)
        options = ort.SessionOptions()
        session = ort.InferenceSession(buffer.getvalue(), options, providers=["CPUExecutionProvider"])
        feeds = {i.name: a for i, a in zip(session.get_inputs(), ins)}
        return lambda: session.run(None, feeds)[0]
    return build


BUILDERS = {name: _build(name) for name in
            ("sum_fma", "gelu", "softmax", "layer_norm", "mlp", "attention", "cnn_block", "dispatch")}
