"""The Dectris ARINA HDF5 layout, mirrored as named constants.

An ARINA acquisition is a *master* file ``<name>_master.h5`` plus data *shards*
``<name>_data_NNNNNN.h5``. The master holds the detector description and one external
link per shard; each shard holds consecutive frames ``(n, det_r, det_c)`` chunked one
frame per chunk and compressed with the HDF5 bitshuffle filter in its LZ4 mode.

A compressed chunk (the filter's output) is::

    u64 BE  uncompressed bytes of the chunk
    u32 BE  block size in bytes (elements per block * element size)
    repeat: u32 BE compressed length L, then L bytes of one LZ4 block

Each LZ4 block decodes to one bit-shuffled block of ``block_size`` elements; the last
block holds the remaining whole multiple of 8 elements, and the final
``n_elements % 8`` elements are stored raw (not shuffled, not compressed) at the end.
See ``docs/arina.md``.
"""

from __future__ import annotations

import re
from typing import Final

MASTER_SUFFIX: Final = "_master.h5"
SHARD_NAME_FORMAT: Final = "{name}_data_{index:06d}.h5"
SHARD_FIRST_INDEX: Final = 1

DATA_GROUP: Final = "/entry/data"
SHARD_LINK_FORMAT: Final = "data_{index:06d}"
SHARD_LINK_PATTERN: Final = re.compile(r"^data_(\d{6})$")
SHARD_DATASET: Final = "/entry/data/data"
SCAN_SHAPE_ATTR: Final = "scan_shape"
#: Attributes of a shard's dataset: its first and last frame numbers, 1-based, inclusive.
IMAGE_NR_ATTRS: Final = ("image_nr_low", "image_nr_high")

DETECTOR_GROUP: Final = "/entry/instrument/detector"
DETECTOR_SPECIFIC_GROUP: Final = "/entry/instrument/detector/detectorSpecific"
PIXEL_MASK: Final = "pixel_mask"
NTRIGGER: Final = "ntrigger"
NIMAGES: Final = "nimages"
X_PIXELS: Final = "x_pixels_in_detector"
Y_PIXELS: Final = "y_pixels_in_detector"
SATURATION_VALUE: Final = "saturation_value"
BIT_DEPTH_IMAGE: Final = "bit_depth_image"
X_PIXEL_SIZE: Final = "x_pixel_size"
Y_PIXEL_SIZE: Final = "y_pixel_size"
DETECTOR_DISTANCE: Final = "detector_distance"
DESCRIPTION: Final = "description"
COUNT_TIME: Final = "count_time"
FRAME_TIME: Final = "frame_time"

#: Dectris pixel-mask bit for a dead pixel (other bits: 1 gap, 4 under-responding,
#: 8 over-responding, 16 noisy). Any nonzero value marks the pixel invalid.
PIXEL_MASK_DEAD: Final = 2

#: HDF5 filter id of bitshuffle, and its cd_values for the LZ4 mode.
BSHUF_FILTER_ID: Final = 32008
BSHUF_COMPRESS_LZ4: Final = 2
CHUNK_HEADER_BYTES: Final = 12
BLOCK_HEADER_BYTES: Final = 4
#: The filter's default block size: 8 KiB of elements, a multiple of 8 elements.
BSHUF_TARGET_BLOCK_BYTES: Final = 8192
BSHUF_BLOCK_MULTIPLE: Final = 8

SUPPORTED_DTYPES: Final = ("uint8", "uint16", "uint32")


def default_block_elements(elem_size: int) -> int:
    """Elements per bitshuffle block chosen by the filter for ``elem_size`` bytes."""
    elements = BSHUF_TARGET_BLOCK_BYTES // elem_size
    return max(128, elements - elements % BSHUF_BLOCK_MULTIPLE)


def shard_link_name(index: int) -> str:
    return SHARD_LINK_FORMAT.format(index=index)


def shard_file_name(name: str, index: int) -> str:
    return SHARD_NAME_FORMAT.format(name=name, index=index)
