#!/usr/bin/env bash
# Assembles carry/deps: the headers, shared libraries and pkg-config files of the Debian
# packages that the full moeflux (tokenizer, chat templates, server, line editing) needs and
# the GPU machine lacks (PCRE2, utf8proc, cpp-httplib with OpenSSL / brotli / zlib, libedit,
# pkg-config),
# so that scripts/device-check.sh can build and run `moeflux serve` there. Pass carry/deps in
# the device call's carry. Usage: scripts/carry-deps.sh   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
D=carry/deps
ARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
rm -rf "$D"
mkdir -p "$D/include" "$D/lib/pkgconfig"
for h in pcre2.h utf8proc.h httplib.h histedit.h editline openssl brotli; do cp -rL "/usr/include/$h" "$D/include/"; done
cp -rL "/usr/include/$ARCH/openssl/." "$D/include/openssl/"  # opensslconf.h, configuration.h
for l in pcre2-8 utf8proc cpp-httplib edit bsd md tinfo ssl crypto brotlicommon brotlidec brotlienc; do
  cp -P /usr/lib/"$ARCH"/lib"$l".so* "$D/lib/" 2>/dev/null || cp -P /lib/"$ARCH"/lib"$l".so* "$D/lib/"
done
# pkg-config itself (CMake's FindPkgConfig), which the GPU machine may lack.
mkdir -p "$D/bin"
cp -L /usr/bin/pkgconf "$D/bin/pkg-config"
cp -P /usr/lib/"$ARCH"/libpkgconf.so* "$D/lib/" 2>/dev/null || cp -P /lib/"$ARCH"/libpkgconf.so* "$D/lib/"
pc() {  # pc NAME LIBS CFLAGS
  printf 'prefix=${pcfiledir}/../..\nincludedir=${prefix}/include\nlibdir=${prefix}/lib\n\nName: %s\nDescription: carried\nVersion: 99\nLibs: -L${libdir} %s\nCflags: -I${includedir} %s\n' \
    "$1" "$2" "$3" >"$D/lib/pkgconfig/$1.pc"
}
pc libpcre2-8 -lpcre2-8 ""
pc libutf8proc -lutf8proc ""
pc cpp-httplib "-lcpp-httplib -lssl -lcrypto -lbrotlidec -lbrotlienc -lbrotlicommon" \
  "-DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT -DCPPHTTPLIB_BROTLI_SUPPORT"
pc libedit -ledit ""
du -sh "$D"
