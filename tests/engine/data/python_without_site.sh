#!/bin/sh
# A Python without site-packages (-S): none of torch, msa or matplotlib can be imported.
exec python3 -S "$@"
