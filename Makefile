# Vigil: release build and installation. `swift build` is still the way to
# build for development; this file builds what an installation needs and
# installs it.
#
#   make                                   # release vigil, Swift and C plugins (and Rust if cargo exists)
#   make install PREFIX=/usr/local         # also DESTDIR=… (staging) and SYSCONFDIR=… (default /etc)
#   make uninstall PREFIX=/usr/local       # removes what install put there, except the manifest
#   make check                             # the fast tier: unit and in-process tests (VIGIL_TEST_TIER=fast)
#   make test                              # every test (scripts/test: its needs, then swift test), as CI runs them
#   make install CONFIG=debug              # the debug build instead (CI checks the installation with
#                                          # the build its tests made; a release build is what to ship)
#   make deb                               # .build/dist/vigil_VERSION_ARCH.deb (and vigil-collectd): scripts/build-deb
#   make dist                              # .build/dist/vigil-VERSION.tar.gz (git archive of HEAD) and the .deb
#
# An installed tree needs no toolchain: the Swift runtime libraries the
# binary and the Swift plugins use are copied from the toolchain into
# $(PREFIX)/lib/vigil, and run paths relative to $ORIGIN (patchelf) point at
# them: $(PREFIX)/bin/vigil -> $ORIGIN/../lib/vigil, each plugin in
# $(PREFIX)/lib/vigil/plugins -> $ORIGIN/.. . The ffi plugin also needs the
# system's libffi (Debian: libffi8).

PREFIX ?= /usr/local
DESTDIR ?=
SYSCONFDIR ?= /etc
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib/vigil
PLUGINDIR ?= $(LIBDIR)/plugins
INCLUDEDIR ?= $(PREFIX)/include/vigil
# The example plugins, which `vigil new-plugin` copies, and the SDK its Swift
# plugins depend on by path (it looks for them at ../share/vigil/examples and
# ../share/vigil/sdk from the binary: keep DATADIR beside BINDIR).
DATADIR ?= $(PREFIX)/share/vigil
MANDIR ?= $(PREFIX)/share/man
UNITDIR ?= $(PREFIX)/lib/systemd/system
# The unit runs as the system user vigil: its sysusers.d entry goes here, and
# an install as root without DESTDIR creates the user at once (CREATE_USER=no
# does not: scripts/test-install, whose prefix is a temporary one).
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
CREATE_USER ?= yes

# The version, in one place: Sources/VigilCore/Version.swift (vigil
# --version). The man page, the packages and the tarball are named by it.
VERSION := $(shell sed -n 's/^public let vigilVersion = "\(.*\)"$$/\1/p' Sources/VigilCore/Version.swift)

SWIFT ?= swift
SWIFT_FLAGS ?=
PATCHELF ?= patchelf
INSTALL ?= install
SHELL := /bin/bash

# The build configuration, and its products directory (swift build -c
# release --show-bin-path would say the same, at the cost of a package
# resolution).
CONFIG ?= release
BIN := .build/$(CONFIG)
# C plugins (scripts/build-c-plugins) and the Rust example, apart from
# SwiftPM's own files and from the folder the tests add their hostile
# fixtures to (.build/CONFIG/c-plugins): only what ships is installed.
EXTRA := .build/install-$(CONFIG)/plugins
RUST_TARGET := .build/rust-target

# The Swift plugins are the products Package.swift declares with plugin(…):
# lib<name>.so, or lib<product>.so where it gives one. One list, no copy.
SWIFT_PLUGINS := ${shell sed -n 's/^ *plugin("\([^"]*\)".*product: "\([^"]*\)".*/\2/p; t; s/^ *plugin("\([^"]*\)".*/\1/p' Package.swift}
SWIFT_PLUGIN_FILES := $(patsubst %,$(BIN)/lib%.so,$(SWIFT_PLUGINS))

# The toolchain's runtime directory, the only place libraries are bundled
# from: as the compiler reports it (right for swiftly's proxies too), else
# next to the swift found on PATH.
SWIFT_RUNTIME_DIR ?= $(shell d="$$($(SWIFT)c -print-target-info 2>/dev/null | sed -n '/"runtimeLibraryPaths"/{n;s/^ *"\(.*\)",\{0,1\}$$/\1/p;}')"; \
	[ -d "$$d" ] || d="$$(dirname "$$(readlink -f "$$(command -v $(SWIFT))")")/../lib/swift/linux"; [ -d "$$d" ] && readlink -f "$$d")

# The packages SwiftPM resolved for this build, where the SDK takes the one
# it needs (Yams) from: SwiftPM's default scratch path, as BIN is.
CHECKOUTS ?= .build/checkouts

CARGO := $(shell command -v cargo 2>/dev/null || { [ -x "$$HOME/.cargo/bin/cargo" ] && echo "$$HOME/.cargo/bin/cargo"; })

.PHONY: all swift c-plugins rust-plugins install uninstall check test deb dist

all: swift c-plugins rust-plugins

# SwiftPM decides what is out of date; it is always asked.
swift:
	$(SWIFT) build -c $(CONFIG) $(SWIFT_FLAGS)

c-plugins:
	scripts/build-c-plugins $(EXTRA)

rust-plugins:
ifneq ($(CARGO),)
	CARGO="$(CARGO)" scripts/build-rust-plugins $(EXTRA) --target-dir $(RUST_TARGET)
else
	@echo "cargo not found: the Rust example plugins (boottime, influx) are not built"
endif

# Files are staged under DESTDIR; the paths written into the unit are the
# installed ones, without DESTDIR. The manifest is installed only when none
# is there: an edited one is never overwritten.
install: all
	@command -v $(PATCHELF) >/dev/null || { echo "make install: $(PATCHELF) not found; install it (apt-get install -y patchelf)" >&2; exit 1; }
	@[ -n "$(SWIFT_RUNTIME_DIR)" ] || { echo "make install: the Swift runtime directory was found neither by $(SWIFT)c -print-target-info nor next to $(SWIFT); set SWIFT_RUNTIME_DIR" >&2; exit 1; }
	@for f in $(BIN)/vigil $(SWIFT_PLUGIN_FILES); do [ -f "$$f" ] || { echo "make install: $$f was not built" >&2; exit 1; }; done
	$(INSTALL) -d -m 0755 "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(LIBDIR)" "$(DESTDIR)$(PLUGINDIR)" "$(DESTDIR)$(INCLUDEDIR)" \
		"$(DESTDIR)$(MANDIR)/man1" "$(DESTDIR)$(UNITDIR)" "$(DESTDIR)$(SYSUSERSDIR)" "$(DESTDIR)$(SYSCONFDIR)/vigil"
	$(INSTALL) -m 0755 $(BIN)/vigil "$(DESTDIR)$(BINDIR)/vigil"
	$(PATCHELF) --set-rpath '$$ORIGIN/../lib/vigil' "$(DESTDIR)$(BINDIR)/vigil"
	$(INSTALL) -m 0755 $(SWIFT_PLUGIN_FILES) "$(DESTDIR)$(PLUGINDIR)/"
	for f in $(notdir $(SWIFT_PLUGIN_FILES)); do $(PATCHELF) --set-rpath '$$ORIGIN/..' "$(DESTDIR)$(PLUGINDIR)/$$f" || exit 1; done
	$(INSTALL) -m 0755 $(EXTRA)/*.so "$(DESTDIR)$(PLUGINDIR)/"
	{ printf '%s\n' $(notdir $(SWIFT_PLUGIN_FILES)); for f in $(EXTRA)/*.so; do basename "$$f"; done; } > "$(DESTDIR)$(LIBDIR)/plugins.txt"
	# The collectd plugin's shim (built where collectd-dev is installed) beside it.
	if [ -f $(EXTRA)/collectd-shim/libvigil_collectd_shim.so ]; then \
		$(INSTALL) -d -m 0755 "$(DESTDIR)$(PLUGINDIR)/collectd-shim" && \
		$(INSTALL) -m 0755 $(EXTRA)/collectd-shim/libvigil_collectd_shim.so "$(DESTDIR)$(PLUGINDIR)/collectd-shim/"; \
	fi
	scripts/bundle-swift-runtime "$(SWIFT_RUNTIME_DIR)" "$(DESTDIR)$(LIBDIR)" $(BIN)/vigil $(SWIFT_PLUGIN_FILES)
	$(INSTALL) -m 0644 Sources/CVigilPlugin/include/vigil_plugin.h "$(DESTDIR)$(INCLUDEDIR)/vigil_plugin.h"
	scripts/install-examples "$(DESTDIR)$(DATADIR)/examples" "$(INSTALL)"
	$(INSTALL) -d -m 0755 "$(DESTDIR)$(DATADIR)/prometheus"
	$(INSTALL) -m 0644 dist/prometheus/*.yaml "$(DESTDIR)$(DATADIR)/prometheus/"
	scripts/install-sdk "$(DESTDIR)$(DATADIR)/sdk" "$(CHECKOUTS)" "$(INSTALL)"
	sed -e 's|^\(\.TH VIGIL 1 [^ ]* \)"vigil [^"]*"|\1"vigil $(VERSION)"|' dist/vigil.1 > "$(DESTDIR)$(MANDIR)/man1/vigil.1" && \
		chmod 0644 "$(DESTDIR)$(MANDIR)/man1/vigil.1"
	$(INSTALL) -m 0644 dist/vigil.sysusers "$(DESTDIR)$(SYSUSERSDIR)/vigil.conf"
	sed -e 's|/usr/local/bin/vigil|$(BINDIR)/vigil|g' -e 's|/etc/vigil/|$(SYSCONFDIR)/vigil/|g' dist/vigil.service \
		> "$(DESTDIR)$(UNITDIR)/vigil.service.tmp" && chmod 0644 "$(DESTDIR)$(UNITDIR)/vigil.service.tmp" && \
		mv -f "$(DESTDIR)$(UNITDIR)/vigil.service.tmp" "$(DESTDIR)$(UNITDIR)/vigil.service"
	@if [ "$(CREATE_USER)" = yes ] && [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && ! getent passwd vigil >/dev/null; then \
		if command -v systemd-sysusers >/dev/null; then echo "systemd-sysusers dist/vigil.sysusers   # the unit's user vigil"; systemd-sysusers dist/vigil.sysusers; \
		else echo "adduser --system --group vigil   # the unit's user"; adduser --quiet --system --group --home /var/lib/vigil --no-create-home vigil; fi; \
	fi
	@if [ -e "$(DESTDIR)$(SYSCONFDIR)/vigil/vigil.yaml" ]; then \
		echo "kept $(DESTDIR)$(SYSCONFDIR)/vigil/vigil.yaml (the new default is dist/vigil.yaml)"; \
	else \
		echo "$(INSTALL) -m 0644 dist/vigil.yaml $(DESTDIR)$(SYSCONFDIR)/vigil/vigil.yaml"; \
		$(INSTALL) -m 0644 dist/vigil.yaml "$(DESTDIR)$(SYSCONFDIR)/vigil/vigil.yaml"; \
	fi

# Everything install wrote, by the lists it left in $(LIBDIR), except the
# manifest (it may hold the administrator's edits); plugins others put in
# $(PLUGINDIR) stay, and so does the directory then.
uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/vigil" "$(DESTDIR)$(INCLUDEDIR)/vigil_plugin.h" \
		"$(DESTDIR)$(MANDIR)/man1/vigil.1" "$(DESTDIR)$(UNITDIR)/vigil.service" "$(DESTDIR)$(SYSUSERSDIR)/vigil.conf"
	@set -e; lib="$(DESTDIR)$(LIBDIR)"; \
	for pair in "plugins.txt:plugins/" "runtime-libraries.txt:"; do \
		list="$$lib/$${pair%%:*}"; [ -f "$$list" ] || continue; \
		while IFS= read -r name; do \
			case "$$name" in ""|*/*|.|..) continue ;; esac; \
			echo "rm -f $$lib/$${pair#*:}$$name"; rm -f "$$lib/$${pair#*:}$$name"; \
		done < "$$list"; \
		rm -f "$$list"; \
	done
	rm -f "$(DESTDIR)$(PLUGINDIR)/collectd-shim/libvigil_collectd_shim.so"
	rm -rf "$(DESTDIR)$(DATADIR)/examples" "$(DESTDIR)$(DATADIR)/sdk" "$(DESTDIR)$(DATADIR)/prometheus"
	-rmdir "$(DESTDIR)$(PLUGINDIR)/collectd-shim" "$(DESTDIR)$(PLUGINDIR)" "$(DESTDIR)$(LIBDIR)" "$(DESTDIR)$(INCLUDEDIR)" \
		"$(DESTDIR)$(DATADIR)" 2>/dev/null
	@[ ! -e "$(DESTDIR)$(SYSCONFDIR)/vigil/vigil.yaml" ] || echo "left $(DESTDIR)$(SYSCONFDIR)/vigil/vigil.yaml in place"

# The Debian packages, from this build (CONFIG=debug packages the debug one).
deb:
	CONFIG=$(CONFIG) scripts/build-deb .build/dist

# The source tarball of HEAD, named by the version, and the packages.
# Modes 755 and 644 (git's default leaves folders group-writable, 775, and
# root's tar keeps that: vigil then refuses the plugins built below them).
dist: deb
	git -c tar.umask=0022 archive --format=tar.gz --prefix=vigil-$(VERSION)/ -o .build/dist/vigil-$(VERSION).tar.gz HEAD
	@echo .build/dist/vigil-$(VERSION).tar.gz

# The suites that start the vigil binary or a peer carry .startsProcesses
# (Tests/VigilHostTests/Support.swift) and are skipped by the fast tier.
check:
	VIGIL_TEST_TIER=fast $(SWIFT) test

# What the tests need is installed (as root) or named first: scripts/test-deps.
test:
	scripts/test
