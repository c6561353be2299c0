"""How results are laid out for people and scripts: consoles, cell tables that fall back to
one line per cell where a table does not fit, and the machine-readable outputs."""
