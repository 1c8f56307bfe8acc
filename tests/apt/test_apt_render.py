"""Rendered ShapesSG: glyphs in their boxes, occlusion by depth, cue marks scaled by cue_strength, the CNN path."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from iclr26.apt.config import DataConfig, RenderConfig
from iclr26.apt.render import GLYPHS, GRIP_COLOUR, GlyphCNN, crops, render_scene, rendered_dataset
from iclr26.apt.shapes_sg import generate, generate_with_scenes

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SIZE = 96


def _scene(cls, boxes, depth=None, stride=None, cues=None):
    n = len(cls)
    return {
        "cls": list(cls),
        "pose": [0] * n,
        "stride": list(stride or [0] * n),
        "boxes": [np.asarray(b, dtype=float) for b in boxes],
        "depth": list(depth if depth is not None else range(n)),
        "cues": dict(cues or {}),
        "rels": [],
    }


def _render(scene, cue=1.0, noise=0.0, seed=0):
    return render_scene(scene, SIZE, cue, noise, np.random.default_rng(seed))


def _is_glyph(px, cls):
    """A glyph pixel is its class colour times a texture factor in [0.7, 1]."""
    rgb = np.asarray(GLYPHS[cls][1])
    ratio = px / rgb
    return np.ptp(ratio) < 1e-6 and 0.7 - 1e-6 <= ratio[0] <= 1 + 1e-6


def test_each_glyph_is_its_colour_inside_its_box_and_deterministic():
    for cls in GLYPHS:
        box = (0.5, 0.5, 0.3, 0.4)
        img = _render(_scene([cls], [box]))
        inside = img[29:67, 34:62].reshape(-1, 3)  # rows 0.3-0.7, cols 0.35-0.65 of the image
        n_glyph = sum(_is_glyph(px, cls) for px in inside)
        assert n_glyph >= 0.45 * len(inside), cls  # even the triangle / diamond cover half the box
        outside = np.concatenate([img[:27].reshape(-1, 3), img[69:].reshape(-1, 3)])
        assert np.allclose(outside, 0.5), cls  # nothing drawn outside the box
        others = [c for c in GLYPHS if c != cls]
        assert not any(_is_glyph(img[48, 48], c) for c in others), cls
    scene = generate_with_scenes(DataConfig(n_train=3, n_val=1, n_test=1), 0)[1][0][0]
    a, b = _render(scene, 0.1, 0.05, seed=3), _render(scene, 0.1, 0.05, seed=3)
    assert np.array_equal(a, b) and not np.array_equal(a, _render(scene, 0.1, 0.05, seed=4))


def test_nearer_object_occludes():
    boxes = [(0.45, 0.5, 0.3, 0.3), (0.55, 0.5, 0.3, 0.3)]
    near_car = _render(_scene(["car", "table"], boxes, depth=[0.2, 0.8]))
    near_table = _render(_scene(["car", "table"], boxes, depth=[0.8, 0.2]))
    assert _is_glyph(near_car[48, 48], "car") and _is_glyph(near_table[48, 48], "table")
    # outside the overlap each keeps its own colour whatever the order
    assert _is_glyph(near_table[48, 35], "car") and _is_glyph(near_car[48, 62], "table")


def _diff(a, b):
    return np.abs(a - b).max(axis=-1)


def test_stride_notch_only_for_striders_at_the_bottom_and_scaled_by_cue():
    box = [(0.5, 0.5, 0.2, 0.4)]
    still = _render(_scene(["person"], box))
    d1 = _diff(_render(_scene(["person"], box, stride=[1])), still)
    assert d1.max() > 0.3 and (d1[:51] == 0).all()  # only in the lower 40% of the box (rows 29-66)
    small = _diff(_render(_scene(["person"], box, stride=[1]), cue=0.01), _render(_scene(["person"], box), cue=0.01))
    assert 0 < small.max() <= 0.011 * d1.max()


def test_grip_mark_only_for_gripping_pairs_and_scaled_by_cue():
    boxes = [(0.5, 0.5, 0.2, 0.4), (0.6, 0.5, 0.05, 0.05)]
    plain = _render(_scene(["person", "cup"], boxes, depth=[0.5, 0.4], cues={(0, 1): (1.0, 0.0)}))
    grip = _render(_scene(["person", "cup"], boxes, depth=[0.5, 0.4], cues={(0, 1): (1.0, 1.0)}))
    ys, xs = np.nonzero(_diff(grip, plain))
    assert len(ys) > 0 and np.allclose(grip[ys, xs], GRIP_COLOUR)
    assert abs(ys.mean() - 48) <= 2 and 48 <= xs.mean() <= 58  # between the subject's middle and the cup
    reverse = _render(_scene(["person", "cup"], boxes, depth=[0.5, 0.4], cues={(1, 0): (1.0, 0.0)}))
    assert np.array_equal(reverse, plain)
    faint = _render(_scene(["person", "cup"], boxes, depth=[0.5, 0.4], cues={(0, 1): (1.0, 1.0)}), cue=0.01)
    assert 0 < _diff(faint, plain).max() < 0.02


def test_crops_are_square_around_the_box():
    img = torch.from_numpy(_render(_scene(["car"], [(0.5, 0.5, 0.4, 0.2)]))).permute(2, 0, 1).float()
    c = crops(img, np.array([[0.5, 0.5, 0.4, 0.2], [0.98, 0.5, 0.4, 0.2]]), 24)
    assert c.shape == (2, 3, 24, 24)
    red = c[0, 0] - c[0, 2] > 0.3  # car pixels
    assert red[12].sum() > red[:, 12].sum()  # wide box, square crop: the aspect survives
    assert torch.allclose(c[1, :, :, -4:], torch.tensor(0.5))  # beyond the image edge: background


TINY = DataConfig(n_train=24, n_val=4, n_test=6)
RCFG = RenderConfig(epochs=1, batch_size=64)


@pytest.fixture(scope="module")
def rendered():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # module scope runs before one_torch_thread; conv sums depend on the thread count
    yield rendered_dataset(TINY, RCFG, 0)
    torch.set_num_threads(n)


def test_cnn_path_keeps_labels_pairs_and_widths(rendered):
    data, info = rendered
    ref = generate(TINY, 0)
    for a, b in ((data.train, ref.train), (data.val, ref.val), (data.test, ref.test)):
        for key in ("obj_cls", "pair_s", "pair_o", "pair_label", "pair_geo", "pair_img", "img_obj_start"):
            assert torch.equal(getattr(a, key), getattr(b, key)), key
        assert a.obj_vis.shape == b.obj_vis.shape and a.pair_union.shape == b.pair_union.shape
        assert torch.isfinite(a.obj_vis).all() and not torch.equal(a.obj_vis, b.obj_vis)
    tr = data.train
    same = (tr.pair_s[:, None] == tr.pair_o[None, :]) & (tr.pair_o[:, None] == tr.pair_s[None, :])
    i, j = torch.nonzero(same)[0]
    assert torch.equal(tr.pair_union[i], tr.pair_union[j])  # union crop of (i, j) == (j, i)
    assert not torch.equal(tr.pair_union[0], tr.pair_union[1])
    assert 30_000 <= info["cnn_params"] <= 50_000 and 0 <= info["cnn_class_acc"] <= 1
    again = rendered_dataset(TINY, RCFG, 0)[0]
    assert torch.equal(again.test.obj_vis, data.test.obj_vis) and torch.equal(
        again.test.pair_union, data.test.pair_union
    )


def test_cnn_width_follows_feat_dim():
    cnn = GlyphCNN(32)
    assert cnn.features(torch.rand(5, 3, 24, 24)).shape == (5, 32)
    assert [z.shape[1] for z in cnn(torch.rand(2, 3, 24, 24))] == [12, 3, 2]


def test_bad_render_settings_raise():
    with pytest.raises(ValueError, match="image_size must be >= 32"):
        rendered_dataset(TINY, replace(RCFG, image_size=16), 0)
    with pytest.raises(ValueError, match="crop must be >= 8"):
        rendered_dataset(TINY, replace(RCFG, crop=4), 0)
    with pytest.raises(ValueError, match="epochs"):
        rendered_dataset(TINY, replace(RCFG, epochs=0), 0)
