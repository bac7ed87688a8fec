#!/usr/bin/env bash
# install-deps.sh installs what the tests and the linters need, and nothing that
# is already there, so it is safe to run before every `make test`.
#
#   scripts/install-deps.sh [servers]  valkey-server (Valkey 7.2+), the PostgreSQL server,
#                                      pgbouncer (for the pooler checks of backends/postgres),
#                                      a C compiler (the fault matrix builds its clock shim) and the
#                                      ru_RU.UTF-8 locale (for the localized fault rows)
#   scripts/install-deps.sh lint       staticcheck, into GOBIN (or GOPATH/bin)
#   scripts/install-deps.sh bench      benchstat (for bench/*/run.sh), into GOBIN (or GOPATH/bin)
#   scripts/install-deps.sh all        all three
#
# The servers come from Debian: PostgreSQL from the release itself, valkey-server
# from bookworm-backports on bookworm (the suite is added to the existing apt
# source, so the machine keeps using the mirror it already has). Package scripts
# are not allowed to leave a system service running on the default ports: the
# tests start their own throwaway servers on free loopback ports.
#
# On a machine without apt-get it prints what to install and exits non-zero.
set -euo pipefail

log() { printf 'install-deps: %s\n' "$*"; }
die() { printf 'install-deps: %s\n' "$*" >&2; exit 1; }

SUDO=()
if [[ $EUID -ne 0 ]]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo)
	fi
fi

as_root() {
	if [[ $EUID -ne 0 && ${#SUDO[@]} -eq 0 ]]; then
		die "need root (or sudo) to run: $*"
	fi
	log "+ ${SUDO[*]:+${SUDO[*]} }$*"
	"${SUDO[@]}" "$@"
}

codename() {
	(. /etc/os-release 2>/dev/null && printf '%s' "${VERSION_CODENAME:-}")
}

have_valkey() { command -v valkey-server >/dev/null 2>&1; }

have_pgbouncer() { command -v pgbouncer >/dev/null 2>&1 || [[ -x /usr/sbin/pgbouncer ]]; }

have_postgres() {
	if [[ -n ${LEASE_PG_BIN:-} && -x ${LEASE_PG_BIN}/initdb ]]; then
		return 0
	fi
	compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && return 0
	command -v initdb >/dev/null 2>&1
}

manual_instructions() {
	cat >&2 <<-'EOF'
		install-deps: apt-get is not available; install these by hand, then run again:
		  - valkey-server, Valkey 7.2 or newer (8.x preferred), on PATH
		  - the PostgreSQL 15 server binaries (initdb, postgres); put their directory
		    in LEASE_PG_BIN if it is not /usr/lib/postgresql/<version>/bin or on PATH
		  - a C compiler as cc, with the C library's headers (the fault matrix's
		    server clock rows build a small LD_PRELOAD library)
		or point the tests at running servers instead:
		  LEASE_VALKEY_ADDR=host:port  LEASE_POSTGRES_URL=postgres://user@host:port/db
	EOF
	exit 1
}

# enable_backports adds "<codename>-backports" to the apt sources, reusing the
# mirror of the source that already serves "<codename>".
enable_backports() {
	local code=$1 suite="$1-backports" f
	if grep -rqsE "(^|[[:space:]])${suite}([[:space:]]|$)" /etc/apt/sources.list /etc/apt/sources.list.d/; then
		log "apt already has ${suite}"
		return 0
	fi
	# deb822 sources: append the suite to a Suites line that lists "<codename>".
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -f $f ]] || continue
		if grep -qE "^Suites:(.*[[:space:]])?${code}([[:space:]]|$)" "$f"; then
			log "adding ${suite} to the Suites of the ${code} entry in ${f}"
			as_root sed -i -E "/^Suites:(.*[[:space:]])?${code}([[:space:]]|\$)/ s/[[:space:]]*\$/ ${suite}/" "$f"
			return 0
		fi
	done
	# One-line sources: copy the "deb ... <codename> main" line with the suite changed.
	local line
	line=$(grep -hsE "^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?[^[:space:]]+[[:space:]]+${code}[[:space:]]+.*main" \
		/etc/apt/sources.list /etc/apt/sources.list.d/*.list | head -n1 || true)
	if [[ -n $line ]]; then
		line=$(sed -E "s/^(deb[[:space:]]+(\[[^]]*\][[:space:]]+)?[^[:space:]]+[[:space:]]+)${code}([[:space:]])/\1${suite}\3/" <<<"$line")
		log "adding /etc/apt/sources.list.d/${suite}.list"
		printf '%s\n' "$line" | as_root tee "/etc/apt/sources.list.d/${suite}.list" >/dev/null
		return 0
	fi
	die "found no apt source for ${code} to derive ${suite} from; add ${suite} by hand"
}

# Keep package scripts from starting services while we install: invoke-rc.d
# asks policy-rc.d, and 101 means "not allowed". An existing policy stays.
POLICY=/usr/sbin/policy-rc.d
OWN_POLICY=0
block_service_start() {
	if [[ ! -e $POLICY ]]; then
		printf '#!/bin/sh\nexit 101\n' | as_root tee "$POLICY" >/dev/null
		as_root chmod 755 "$POLICY"
		OWN_POLICY=1
	fi
}
unblock_service_start() {
	if [[ $OWN_POLICY -eq 1 ]]; then
		as_root rm -f "$POLICY"
		OWN_POLICY=0
	fi
}
trap unblock_service_start EXIT

# stop_service stops and disables a system service a package may have started
# anyway (for example under systemd, which ignores policy-rc.d).
stop_service() {
	local svc=$1
	if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
		if systemctl is-enabled --quiet "$svc" 2>/dev/null || systemctl is-active --quiet "$svc" 2>/dev/null; then
			as_root systemctl disable --now "$svc" || true
		fi
	elif [[ -x /etc/init.d/$svc ]]; then
		as_root /etc/init.d/"$svc" stop >/dev/null 2>&1 || true
	fi
}

APT_UPDATED=0
apt_update() {
	if [[ $APT_UPDATED -eq 0 ]]; then
		as_root apt-get update -qq
		APT_UPDATED=1
	fi
}

apt_install() {
	block_service_start
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
	unblock_service_start
}

# have_cc reports whether a C compiler and the C library's headers are
# installed: the fault matrix builds internal/testkit/chaos/testdata/clockshim.c and
# preloads it into a server to step that server's clock alone.
have_cc() {
	command -v cc >/dev/null 2>&1 && [[ -e /usr/include/dlfcn.h ]]
}

install_servers() {
	if have_valkey && have_postgres && have_pgbouncer && have_cc; then
		log "valkey-server: $(valkey-server --version | head -n1)"
		log "postgresql: found"
		log "pgbouncer: found"
		log "cc: found"
		return 0
	fi
	command -v apt-get >/dev/null 2>&1 || manual_instructions

	if ! have_valkey; then
		local code target=()
		code=$(codename)
		if [[ $code == bookworm ]]; then
			enable_backports "$code"
			target=(-t "${code}-backports")
		fi
		apt_update
		log "installing valkey-server"
		apt_install "${target[@]}" valkey-server
		stop_service valkey-server
		log "valkey-server: $(valkey-server --version | head -n1)"
	fi

	if ! have_postgres; then
		apt_update
		log "installing postgresql"
		apt_install postgresql
		stop_service postgresql
	fi
	log "postgresql: $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)"

	if ! have_pgbouncer; then
		apt_update
		log "installing pgbouncer"
		apt_install pgbouncer
		stop_service pgbouncer
	fi

	if ! have_cc; then
		apt_update
		log "installing gcc and libc6-dev"
		apt_install gcc libc6-dev
	fi
	log "cc: found"
}

# install_locale compiles the ru_RU.UTF-8 locale when it is missing, so the
# localized rows of the fault table (lc_messages ru: a FATAL's severity reads
# "ВАЖНО") run against the real server instead of errors built to look like
# them. Without localedef and the locale sources it only says so.
install_locale() {
	if locale -a 2>/dev/null | grep -qiE '^ru_RU\.utf-?8$'; then
		log "locale ru_RU.UTF-8: found"
		return 0
	fi
	if ! command -v localedef >/dev/null 2>&1 || [[ ! -e /usr/share/i18n/locales/ru_RU ]]; then
		log "locale ru_RU.UTF-8: missing, and no localedef to build it; the localized fault rows use built errors"
		return 0
	fi
	log "compiling the locale ru_RU.UTF-8"
	as_root localedef -i ru_RU -f UTF-8 ru_RU.UTF-8
}

install_lint() {
	local gobin
	gobin=$(go env GOBIN)
	[[ -n $gobin ]] || gobin="$(go env GOPATH)/bin"
	if [[ -x $gobin/staticcheck ]]; then
		log "staticcheck: $("$gobin/staticcheck" -version)"
		return 0
	fi
	log "+ go install honnef.co/go/tools/cmd/staticcheck@latest (into $gobin)"
	GOBIN=$gobin go install honnef.co/go/tools/cmd/staticcheck@latest
	log "staticcheck: $("$gobin/staticcheck" -version)"
}

install_bench() {
	local gobin
	gobin=$(go env GOBIN)
	[[ -n $gobin ]] || gobin="$(go env GOPATH)/bin"
	if [[ -x $gobin/benchstat ]]; then
		log "benchstat: found"
		return 0
	fi
	log "+ go install golang.org/x/perf/cmd/benchstat@latest (into $gobin)"
	GOBIN=$gobin go install golang.org/x/perf/cmd/benchstat@latest
	log "benchstat: installed"
}

case ${1:-servers} in
servers)
	install_servers
	install_locale
	;;
lint) install_lint ;;
bench) install_bench ;;
all)
	install_servers
	install_locale
	install_lint
	install_bench
	;;
*) die "usage: $0 [servers|lint|bench|all]" ;;
esac
