# doc-links.sed - the links of README.md and SECURITY.md (the pages at the top of
# the source tree) as they resolve where the docs are installed
# (PREFIX/share/doc/bramble/, by deploy/install.sh and by `cmake --install` /
# the .deb alike): the docs/*.md pages and proto/PROTOCOL.md lie beside it, and a
# link out of the source tree keeps only its text.
s#](docs/#](#g
s#](proto/PROTOCOL\.md#](PROTOCOL.md#g
s#\[\([^]]*\)\](\.\./[^)]*)#\1#g
