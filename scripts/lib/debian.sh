# Debian packages and the apt repository, for scripts/package (sourced; it
# sets work, MAINTAINER and released, and defines glibc_of and
# install_library).

# The .deb's Depends: the server, and the C libraries the library links to.
deb_depends() { # MAJOR LIBRARY
  local depends="postgresql-$1, libc6 (>= $(glibc_of "$2"))"
  # grep reads all of objdump's output: with -q it may stop early, and
  # pipefail would take objdump's broken pipe for "no libgcc_s".
  if objdump -p "$2" | grep 'NEEDED.*libgcc_s' >/dev/null; then
    depends+=", libgcc-s1"
  fi
  echo "$depends"
}

# postgresql-MAJOR-snowflake-id_VERSION-1_amd64.deb into OUT (dist/ by
# default), in the layout Debian and PGDG share (/usr/lib/postgresql/NN/lib,
# /usr/share/postgresql/NN/extension), from a build's library and extension
# files; SOURCE is the tree it was built from (its README, docs and crate
# graph for the copyright file).
build_deb() { # MAJOR LIBRARY EXTENSION_DIR VERSION SOURCE [OUT]
  local v=$1 so=$2 extension=$3 upstream=$4 source=$5 out=${6:-dist}
  local name="postgresql-$v-snowflake-id" root="$work/deb-$v-$upstream" revision="$upstream-1"
  local doc="$root/usr/share/doc/$name" lib="$root/usr/lib/postgresql/$v/lib"
  rm -rf "$root"
  mkdir -p "$root/DEBIAN" "$lib" "$root/usr/share/postgresql/$v/extension" "$doc"
  install_library "$so" "$lib"
  install -m 644 "$extension"/snowflake_id* "$root/usr/share/postgresql/$v/extension/"
  install -m 644 "$source/README.md" "$doc/"
  if [[ $source == . ]] && git -c safe.directory='*' rev-parse --verify -q HEAD >/dev/null; then
    # The committed docs, not whatever else lies in the working tree.
    git -c safe.directory='*' archive HEAD docs | tar -x -C "$doc"
  else
    cp -r "$source/docs" "$doc/"
  fi
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
  find "$root" -exec touch -h -d "@$released" {} +
  local deb="$out/${name}_${revision}_amd64.deb"
  mkdir -p "$out"
  dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
  echo "== package: $deb"
}

# The previous release's .deb for MAJOR, built from its commit (a debug build:
# the same code in minutes less) into OUT, for the repository's upgrade test.
build_previous_deb() { # MAJOR VERSION COMMIT OUT
  local v=$1 upstream=$2 commit=$3 out=$4 src="$work/previous-$2" pg_config
  pg_config=$(pg_config_for "$v")
  [[ -x $pg_config ]] || { echo "package: no pg_config for PostgreSQL $v" >&2; exit 1; }
  git cat-file -e "$commit^{commit}" 2>/dev/null ||
    { echo "package: the commit of release $upstream ($commit) is not in this clone" >&2; exit 1; }
  rm -rf "$src" "$src-pg$v"
  mkdir -p "$src"
  git archive "$commit" | tar -x -C "$src"
  # The same target directory: the dependencies built for the tests serve it.
  CARGO_TARGET_DIR="$PWD/target" cargo pgrx package --manifest-path "$src/Cargo.toml" --debug \
    --pg-config "$pg_config" --features "pg$v" --no-default-features --out-dir "$src-pg$v"
  local released
  released=$(git -c safe.directory='*' log -1 --format=%ct "$commit")
  build_deb "$v" "$src-pg$v$("$pg_config" --pkglibdir)/snowflake_id.so" \
    "$src-pg$v$("$pg_config" --sharedir)/extension" "$upstream" "$src" "$out"
}

# An apt repository at REPO (suite "stable", component "main") of the .debs
# given, signed, with its public key beside it for signed-by. The key is the
# one in SNOWFLAKE_APT_GNUPGHOME (SNOWFLAKE_APT_KEY names it when that home
# holds several): a release signs with the project's own there. Without it,
# a key made for this build, kept in target/package/gnupg (a new clone or
# `cargo clean` makes another).
build_repository() { # REPO DEB...
  local repo=$1 gnupg=${SNOWFLAKE_APT_GNUPGHOME:-$work/gnupg} key
  shift
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
  local g=(gpg --homedir "$gnupg" --batch --yes --quiet --no-auto-check-trustdb)
  if [[ -z ${SNOWFLAKE_APT_GNUPGHOME:-} ]]; then
    mkdir -p "$gnupg"
    chmod 700 "$gnupg"
    if ! "${g[@]}" --list-secret-keys --with-colons | grep '^sec' >/dev/null; then
      "${g[@]}" --passphrase '' --quick-gen-key \
        "snowflake_id archive signing key (made by scripts/package) <snowflake-id@example.org>" ed25519 sign never
    fi
  fi
  # Exactly one primary secret key, by its fingerprint: the one
  # SNOWFLAKE_APT_KEY names, or the only one there is.
  local listed fingerprints
  listed=$("${g[@]}" --list-secret-keys --with-colons -- ${SNOWFLAKE_APT_KEY:+"$SNOWFLAKE_APT_KEY"})
  fingerprints=$(awk -F: '$1 == "sec" {want = 1; next} $1 == "fpr" && want {print $10; want = 0}' <<<"$listed")
  if [[ $(wc -w <<<"$fingerprints") != 1 ]]; then
    echo "package: $(wc -w <<<"$fingerprints") secret keys in $gnupg${SNOWFLAKE_APT_KEY:+ match $SNOWFLAKE_APT_KEY}: name one with SNOWFLAKE_APT_KEY" >&2
    exit 1
  fi
  key=$fingerprints
  "${g[@]}" --local-user "$key" --clearsign -o "$repo/dists/stable/InRelease" "$repo/dists/stable/Release"
  "${g[@]}" --local-user "$key" -abs -o "$repo/dists/stable/Release.gpg" "$repo/dists/stable/Release"
  "${g[@]}" --export "$key" >"$repo/snowflake-id-archive-keyring.gpg"
  "${g[@]}" --armor --export "$key" >"$repo/snowflake-id-archive-keyring.asc"
  # The agent of the home made for the build only; a release manager's stays.
  [[ -n ${SNOWFLAKE_APT_GNUPGHOME:-} ]] || gpgconf --homedir "$gnupg" --kill gpg-agent 2>/dev/null || true
  echo "== repository: $repo ($# packages, signed by $key)"
}
