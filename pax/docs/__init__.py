"""The docs' generated blocks: every figure a page shows comes from a file a command writes.

`./noxw -s readme` rewrites them (pax.docs.blocks.refresh); tests/docs checks them."""
