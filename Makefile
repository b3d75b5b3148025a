# Packages from this source tree (README "Install"):
#   make deb   -> build/deb/pynfsrdma_VERSION_all.deb   (Debian 12: dpkg-buildpackage)
#   make rpm   -> build/rpmbuild/RPMS/noarch/*.rpm and SRPMS/ (rpmbuild; on Debian with --nodeps)
#   make dist  -> build/pynfsrdma-VERSION.tar.gz, the source tarball both start from
# The tarball holds what git tracks at HEAD when this is a git work tree, else the tree as it is.

VERSION := $(shell python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
NAME := pynfsrdma-$(VERSION)
BUILD := $(CURDIR)/build
TARBALL := $(BUILD)/$(NAME).tar.gz
RPMTOP := $(BUILD)/rpmbuild
# Debian has no RPM database of installed packages: rpmbuild cannot check BuildRequires there
RPMBUILD_FLAGS ?= $(if $(wildcard /etc/debian_version),--nodeps)
EXCLUDES := --exclude=./.git --exclude=./.venv --exclude=./build --exclude=./debian --exclude=./mnt \
	--exclude='__pycache__' --exclude='*.egg-info' --exclude=./.mypy_cache --exclude=./.ruff_cache \
	--exclude=./.pytest_cache --exclude=./.hypothesis

.PHONY: dist deb rpm clean

dist: $(TARBALL)

$(TARBALL): FORCE
	mkdir -p $(BUILD)
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
		git archive --format=tar.gz --prefix=$(NAME)/ -o $@ HEAD; \
	else \
		tar -czf $@ $(EXCLUDES) --transform 's,^\.,$(NAME),' .; \
	fi

deb: $(TARBALL)
	rm -rf $(BUILD)/deb && mkdir -p $(BUILD)/deb
	tar -xzf $(TARBALL) -C $(BUILD)/deb
	cp -r $(BUILD)/deb/$(NAME)/packaging/debian $(BUILD)/deb/$(NAME)/debian
	cd $(BUILD)/deb/$(NAME) && dpkg-buildpackage -us -uc -b
	@ls $(BUILD)/deb/*.deb

rpm: $(TARBALL)
	mkdir -p $(RPMTOP)/SOURCES
	cp $(TARBALL) $(RPMTOP)/SOURCES/
	rpmbuild --define "_topdir $(RPMTOP)" $(RPMBUILD_FLAGS) -ba packaging/rpm/pynfsrdma.spec
	@ls $(RPMTOP)/RPMS/noarch/*.rpm $(RPMTOP)/SRPMS/*.rpm

clean:
	rm -rf $(BUILD)

FORCE:
