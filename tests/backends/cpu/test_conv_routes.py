"""The order the convolution routes are tried in (conv.tiles.EMITTERS, filled as the conv
modules are imported): a convolution goes to the first route that fits, so the order is part
of which kernel a convolution gets."""
import pyxla.backends.cpu  # noqa: F401  (imports every route)
from pyxla.backends.cpu.conv.tiles import EMITTERS


def test_routes_are_tried_in_order():
    names = [emitter.__name__ for _, emitter in EMITTERS]
    assert names == ["WeightGradientConvolution", "WinogradConvolution", "PlaneConvolution", "PointwiseGemm",
                     "TiledConvolution", "DepthwiseConvolution"]
