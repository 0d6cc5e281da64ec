# Debian packages and the apt repository, for scripts/package (sourced; it
# sets work, MAINTAINER and released, and defines glibc_of).

# The .deb's Depends: the server, and the C libraries the library links to.
deb_depends() { # MAJOR LIBRARY
  local depends="postgresql-$1, libc6 (>= $(glibc_of "$2"))"
  if objdump -p "$2" | grep -q 'NEEDED.*libgcc_s'; then
    depends+=", libgcc-s1"
  fi
  echo "$depends"
}

# postgresql-MAJOR-snowflake-id_VERSION-1_amd64.deb into dist/, in the layout
# Debian and PGDG share (/usr/lib/postgresql/NN/lib, /usr/share/postgresql/NN/
# extension), from a build's library and extension files; SOURCE is the tree
# it was built from (its README, docs and crate graph for the copyright file).
build_deb() { # MAJOR LIBRARY EXTENSION_DIR VERSION SOURCE
  local v=$1 so=$2 extension=$3 upstream=$4 source=$5
  local name="postgresql-$v-snowflake-id" root="$work/deb-$v-$upstream" revision="$upstream-1"
  local doc="$root/usr/share/doc/$name" lib="$root/usr/lib/postgresql/$v/lib"
  rm -rf "$root"
  mkdir -p "$root/DEBIAN" "$lib" "$root/usr/share/postgresql/$v/extension" "$doc"
  # Stripped as Debian's dh_strip does; the tarball keeps the symbol table.
  install -m 644 "$so" "$lib/snowflake_id.so"
  strip --remove-section=.comment --remove-section=.note --strip-unneeded "$lib/snowflake_id.so"
  install -m 644 "$extension"/snowflake_id* "$root/usr/share/postgresql/$v/extension/"
  install -m 644 "$source/README.md" "$doc/"
  cp -r "$source/docs" "$doc/"
  find "$doc" -type d -exec chmod 755 {} + -o -type f -exec chmod 644 {} +
  python3 scripts/deb-copyright --manifest-path "$source/Cargo.toml" --features "pg$v" >"$doc/copyright"
  # One entry per package release; what changed is in docs/upgrades.md.
  {
    echo "snowflake-id ($revision) unstable; urgency=medium"
    echo
    echo "  * snowflake_id $upstream for PostgreSQL $v; what changed is in"
    echo "    /usr/share/doc/$name/docs/upgrades.md."
    echo
    echo " -- $MAINTAINER  $(date -R -d "@$released")"
  } | gzip -9n >"$doc/changelog.Debian.gz"
  cat >"$root/DEBIAN/control" <<EOF
Package: $name
Source: snowflake-id
Version: $revision
Architecture: amd64
Maintainer: $MAINTAINER
Depends: $(deb_depends "$v" "$lib/snowflake_id.so")
Section: database
Priority: optional
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Description: time-ordered 64-bit Snowflake IDs generated inside PostgreSQL $v
 snowflake_id generates Twitter-Snowflake-style IDs in the database: unique
 across the backends of a server and across servers, increasing, and cheap
 enough to be the default of every primary key.
 .
 Add snowflake_id to shared_preload_libraries, give the server its own
 snowflake_id.datacenter_id and snowflake_id.worker_id, restart, and
 CREATE EXTENSION snowflake_id.
EOF
  # Removing the package removes files, never data: say what a server that
  # preloads the library needs before its next start.
  cat >"$root/DEBIAN/postrm" <<EOF
#!/bin/sh
set -e
if [ "\$1" = remove ]; then
  cat >&2 <<'MSG'
$name: snowflake_id's library and extension files are removed; every
database keeps its data and its IDs. A PostgreSQL $v server with snowflake_id
in shared_preload_libraries will not start without the library: install the
package again, or remove snowflake_id from shared_preload_libraries (and run
DROP EXTENSION snowflake_id in each database that has it) before restarting.
MSG
fi
exit 0
EOF
  chmod 755 "$root/DEBIAN/postrm"
  (cd "$root" && find usr -type f -exec md5sum {} + | sort -k 2) >"$root/DEBIAN/md5sums"
  local deb="dist/${name}_${revision}_amd64.deb"
  dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
  echo "== package: $deb"
}

# The previous release's .deb for MAJOR, built from its commit (a debug build:
# the same code in minutes less), for the repository's upgrade test.
build_previous_deb() { # MAJOR VERSION COMMIT
  local v=$1 upstream=$2 commit=$3 src="$work/previous-$2" pg_config
  pg_config=$(pg_config_for "$v")
  git cat-file -e "$commit^{commit}" 2>/dev/null ||
    { echo "package: the commit of release $upstream ($commit) is not in this clone" >&2; exit 1; }
  rm -rf "$src" "$src-pg$v"
  mkdir -p "$src"
  git archive "$commit" | tar -x -C "$src"
  # The same target directory: the dependencies built for the tests serve it.
  CARGO_TARGET_DIR="$PWD/target" cargo pgrx package --manifest-path "$src/Cargo.toml" --debug \
    --pg-config "$pg_config" --features "pg$v" --no-default-features --out-dir "$src-pg$v"
  build_deb "$v" "$src-pg$v$("$pg_config" --pkglibdir)/snowflake_id.so" \
    "$src-pg$v$("$pg_config" --sharedir)/extension" "$upstream" "$src"
}

# dist/apt: an apt repository (suite "stable", component "main") of the
# .debs given, signed with a key made for this build (kept in
# target/package/gnupg); its public key beside it, for signed-by.
build_repository() { # DEB...
  local repo=dist/apt gnupg="$work/gnupg"
  rm -rf "$repo"
  mkdir -p "$repo/pool/main/s/snowflake-id" "$repo/dists/stable/main/binary-amd64"
  cp "$@" "$repo/pool/main/s/snowflake-id/"
  (
    cd "$repo"
    apt-ftparchive packages pool >dists/stable/main/binary-amd64/Packages
    gzip -9nk dists/stable/main/binary-amd64/Packages
    apt-ftparchive -o APT::FTPArchive::Release::Origin=snowflake_id \
      -o APT::FTPArchive::Release::Label=snowflake_id -o APT::FTPArchive::Release::Suite=stable \
      -o APT::FTPArchive::Release::Codename=stable -o APT::FTPArchive::Release::Architectures=amd64 \
      -o APT::FTPArchive::Release::Components=main \
      -o "APT::FTPArchive::Release::Description=snowflake_id for PostgreSQL 15 to 19" \
      release dists/stable >dists/stable/Release.new
    mv dists/stable/Release.new dists/stable/Release
  )
  mkdir -p "$gnupg"
  chmod 700 "$gnupg"
  if ! GNUPGHOME="$gnupg" gpg --batch --list-secret-keys 2>/dev/null | grep -q sec; then
    GNUPGHOME="$gnupg" gpg --batch --quiet --passphrase '' \
      --quick-gen-key "snowflake_id archive signing key (made by scripts/package) <snowflake-id@example.org>" \
      ed25519 sign never
  fi
  GNUPGHOME="$gnupg" gpg --batch --yes --quiet --clearsign -o "$repo/dists/stable/InRelease" "$repo/dists/stable/Release"
  GNUPGHOME="$gnupg" gpg --batch --yes --quiet -abs -o "$repo/dists/stable/Release.gpg" "$repo/dists/stable/Release"
  GNUPGHOME="$gnupg" gpg --batch --yes --export >"$repo/snowflake-id-archive-keyring.gpg"
  GNUPGHOME="$gnupg" gpg --batch --yes --armor --export >"$repo/snowflake-id-archive-keyring.asc"
  echo "== repository: $repo ($# packages, signed by $(GNUPGHOME="$gnupg" gpg --batch --with-colons --list-keys | awk -F: '/^fpr/ {print $10; exit}'))"
}
