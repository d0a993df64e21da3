# Sourced by the scripts that take one package from another suite of the host's Debian archive
# (scripts/buildx-plugin.sh: trixie's docker-buildx; scripts/cosign.sh: sid's and trixie's cosign).
#
# debian_mirror [VAR...]: the archive to fetch from: the first of the named variables that is set,
#   else the rule imagegen/building/standins/mirrors.py applies to the host's apt sources (the
#   first http(s) `deb` entry of a Debian suite with `main`). No host is written here.
# debian_private_apt WORK MIRROR SUITE...: an apt configuration of its own under WORK (sources,
#   lists, state and cache), exported as APT_CONFIG and updated: the host's sources, lists and
#   state are never changed. `apt-get download PACKAGE/SUITE` then fetches from it.

debian_mirror() {
  local var mirror=""
  for var in "$@"; do
    mirror="${!var:-}"
    [ -n "$mirror" ] && break
  done
  if [ -z "$mirror" ]; then
    mirror=$(apt-get indextargets --no-release-info --format '$(TARGET_OF) $(REPO_URI) $(RELEASE) $(COMPONENT)' 2>/dev/null \
      | awk '$1 == "deb" && $4 == "main" && $2 ~ /^https?:\/\// && $3 !~ /[-\/]/ {print $2; exit}')
  fi
  [ -n "$mirror" ] || return 1
  echo "${mirror%/}"
}

debian_private_apt() {
  local work="$1" mirror="$2" suite
  shift 2
  mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/etc/preferences.d" \
           "$work/etc/sources.list.d" "$work/etc/apt.conf.d" "$work/cache"
  : >"$work/etc/sources.list"
  for suite in "$@"; do
    echo "deb $mirror $suite main" >>"$work/etc/sources.list"
  done
  cat >"$work/apt.conf" <<EOF
Dir::Etc "$work/etc";
Dir::Etc::sourcelist "$work/etc/sources.list";
Dir::Etc::sourceparts "$work/etc/sources.list.d";
Dir::Etc::preferencesparts "$work/etc/preferences.d";
Dir::Etc::trusted "/etc/apt/trusted.gpg";
Dir::Etc::trustedparts "/etc/apt/trusted.gpg.d";
Dir::State::lists "$work/lists";
Dir::State::status "$work/status";
Dir::Cache "$work/cache";
Dir::Cache::archives "$work/archives";
APT::Sandbox::User "root";
// sid's Release file expires within days, and a mirror that is a dated snapshot of the archive
// serves an expired one: its signature is still checked, only its date is not.
Acquire::Check-Valid-Until "false";
EOF
  touch "$work/status"
  export APT_CONFIG="$work/apt.conf"
  apt-get update -qq
}
