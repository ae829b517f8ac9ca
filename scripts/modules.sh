# scripts/modules.sh: sourced by scripts/release, scripts/modcheck and
# scripts/tidy. The Go modules of this repository and how they are released
# (docs/architecture.md, "Modules"): the core, and the leaves otelidem,
# transport/kafka and cmd/idem, which require the core (and cmd/idem the
# other two) at a version, with no replace line. go.work joins them for development only; a user's go
# command never reads it.

core_module=github.com/idemhq/idem
leaves=(otelidem transport/kafka cmd/idem) # directories, in the order they are released

# as_fetched MODCACHE REPO CMD...: runs CMD outside the workspace, as a
# user's go command would, except that the modules under
# github.com/idemhq/idem come from the git repository REPO instead of
# GitHub: the go command clones REPO and makes the module zips itself, as
# proxy.golang.org does from GitHub (git's url.insteadOf, in a git config of
# its own). Every other module comes from this machine's module cache (its
# download directory is a file:// proxy), then from $GOPROXY. Whatever CMD
# downloads lands in MODCACHE, never in the user's module cache, where a
# dry run's v0.1.0 would shadow the real one.
as_fetched() {
	local cache=$1 repo gitdir
	repo=$(cd "$2" && pwd)
	gitdir=$(git -C "$repo" rev-parse --path-format=absolute --git-common-dir)
	shift 2
	mkdir -p "$cache"
	printf '[url "file://%s"]\n\tinsteadOf = https://%s\n' "$gitdir" "$core_module" >"$cache.gitconfig"
	env GOWORK=off GOFLAGS="-mod=mod -modcacherw" GOMODCACHE="$cache" \
		GOPRIVATE="$core_module" GONOPROXY= GONOSUMDB= GOPROXY="$(local_proxy)" \
		GIT_CONFIG_GLOBAL="$cache.gitconfig" GIT_CONFIG_NOSYSTEM=1 "$@"
}

# as_user MODCACHE PROXYDIR CMD...: runs CMD as a user outside this
# repository: no workspace, no replace, a module cache of its own, the
# modules under github.com/idemhq/idem only from the directory PROXYDIR
# (laid out as go mod download leaves $GOMODCACHE/cache/download), and the
# checksum database not consulted for them (they are not public); every
# other module as in as_fetched. It builds with -trimpath, so that the build
# cache serves the next check although its module cache is another
# temporary directory.
as_user() {
	local cache=$1 proxy
	proxy=$(cd "$2" && pwd)
	shift 2
	env GOWORK=off GOFLAGS="-mod=mod -modcacherw -trimpath" GOMODCACHE="$cache" \
		GOPRIVATE= GONOPROXY= GONOSUMDB="$core_module" GOPROXY="file://$proxy,$(local_proxy)" \
		GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 "$@"
}

# local_proxy: this machine's module cache as a proxy, then $GOPROXY.
local_proxy() {
	local proxy
	proxy=$(go env GOPROXY)
	case $proxy in off | "") proxy=https://proxy.golang.org ;; esac
	echo "file://$(go env GOMODCACHE)/cache/download,$proxy"
}

# check_version VERSION: a semantic version this repository can release:
# vMAJOR.MINOR.PATCH with MAJOR 0 or 1 (the module paths have no /vN
# suffix), and an optional pre-release.
check_version() {
	if ! [[ $1 =~ ^v[01]\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
		echo "version $1: want vMAJOR.MINOR.PATCH with MAJOR 0 or 1 (the module paths have no /vN suffix), e.g. v0.1.0" >&2
		return 1
	fi
}

# release_in REPO VERSION CACHE: the release, in the git repository REPO at
# its HEAD (a clean work tree): tag the core VERSION; then for each leaf,
# require the core (and the leaves before it) at VERSION, drop any replace
# line, go mod tidy outside the workspace against those tags, commit, and
# tag DIR/VERSION. The core's tag is on the commit before the leaves'
# changes, which the core's module zip does not contain. Downloads go to
# CACHE.
release_in() {
	release_preflight "$1" "$2" || return 1
	git -C "$1" tag -a "$2" -m "idem $2"
	release_body "$@"
}

# release_preflight REPO VERSION: REPO can be released as VERSION: a valid
# version, a clean work tree, and none of the release's tags yet.
release_preflight() {
	local repo=$1 version=$2 tag
	check_version "$version" || return 1
	if [ -n "$(git -C "$repo" status --porcelain)" ]; then
		echo "release: $repo has uncommitted changes; commit or stash them first" >&2
		return 1
	fi
	for tag in $(release_tags "$version"); do
		if git -C "$repo" rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
			echo "release: tag $tag exists already" >&2
			return 1
		fi
	done
}

# release_tags VERSION: the tags of a release, core first.
release_tags() { echo "$1" "${leaves[@]/%//$1}"; }

# release_body REPO VERSION CACHE: release_in's steps after the core's tag.
release_body() {
	local repo=$1 version=$2 cache=$3 dir req
	req=("-require=$core_module@$version")
	for dir in "${leaves[@]}"; do
		# Each step says || return 1: a caller's || turns off set -e here.
		go -C "$repo/$dir" mod edit "${req[@]}" "-dropreplace=$core_module" "${leaves[@]/#/-dropreplace=$core_module/}" || return 1
		as_fetched "$cache" "$repo" go -C "$repo/$dir" mod tidy || return 1
		if go -C "$repo/$dir" mod edit -json | grep -q '"Replace": \['; then
			echo "release: $dir/go.mod still has a replace line" >&2
			return 1
		fi
		git -C "$repo" commit -q -m "$dir $version: require ${req[*]#-require=}, with no replace line" -- "$dir/go.mod" "$dir/go.sum" || return 1
		git -C "$repo" tag -a "$dir/$version" -m "$core_module/$dir $version" || return 1
		req+=("-require=$core_module/$dir@$version")
	done
	workspace_at "$repo" "$version" || return 1
	git -C "$repo" commit -q -m "go.work: the leaves require $version" -- go.work
}

# workspace_at REPO VERSION: go.work's replace lines, which point the
# versions of this repository's modules that the leaves require at this
# tree, moved to VERSION (go.work is read in development only).
workspace_at() {
	sed -i -E "s#^([[:space:]]*(replace[[:space:]]+)?$core_module(/[^ ]+)?) v[^ ]+ => #\1 $2 => #" "$1/go.work"
	(cd "$1" && go work edit -fmt)
}

# user_check REPO VERSION WORK: what a user outside this repository gets at
# VERSION. The modules are fetched from REPO into a proxy directory as the
# public proxy would serve them; then, with that proxy and a module cache
# of their own: go install cmd/idem@latest (refused if its go.mod had a
# replace line) must resolve VERSION and run; and a program on the core,
# sqlitestore, otelidem and examples/orders must build and run.
user_check() {
	local repo=$1 version=$2 work=$3 proxy bin
	for dir in "" "${leaves[@]/#//}"; do
		as_fetched "$work/fetch" "$repo" go mod download "$core_module$dir@$version" || return 1
	done
	proxy=$work/fetch/cache/download
	bin=$work/bin
	mkdir -p "$bin" "$work/user"
	echo "go install $core_module/cmd/idem@latest"
	(cd "$work/user" && as_user "$work/user-cache" "$proxy" env GOBIN="$bin" go install "$core_module/cmd/idem@latest") || return 1
	if ! go version -m "$bin/idem" | grep -q "^[[:space:]]*dep[[:space:]]*$core_module[[:space:]]*$version[[:space:]]"; then
		echo "modcheck: the installed idem does not link $core_module $version:" >&2
		go version -m "$bin/idem" | grep idemhq >&2
		return 1
	fi
	if go version -m "$bin/idem" | grep -q '=>'; then
		echo "modcheck: the installed idem was built with a replacement:" >&2
		go version -m "$bin/idem" | grep '=>' >&2
		return 1
	fi
	"$bin/idem" graph searchimport >/dev/null
	user_program "$work/user/prog"
	echo "a program on idem, sqlitestore, otelidem and examples/orders, with go get ...@latest"
	(
		cd "$work/user/prog"
		as_user "$work/user-cache" "$proxy" go get "$core_module@latest" "$core_module/otelidem@latest" 2>&1 | grep -v '^go: downloading' || true
		as_user "$work/user-cache" "$proxy" go mod tidy
		as_user "$work/user-cache" "$proxy" go build -o prog .
		got=$(as_user "$work/user-cache" "$proxy" go list -m -f '{{.Path}} {{.Version}}{{with .Replace}} => {{.Path}}{{end}}' "$core_module" "$core_module/otelidem")
		want=$(printf '%s %s\n%s/otelidem %s' "$core_module" "$version" "$core_module" "$version")
		if [ "$got" != "$want" ]; then
			printf 'modcheck: the program got\n%s\nwant\n%s\n' "$got" "$want" >&2
			exit 1
		fi
		./prog
	)
}

# user_program DIR: a program that a user writes, from the README.
user_program() {
	mkdir -p "$1"
	printf 'module example.com/user\n\ngo 1.26.0\n' >"$1/go.mod"
	cat >"$1/main.go" <<'EOF'
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/otelidem"
	"github.com/idemhq/idem/store/sqlitestore"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "user")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "user.db"), nil)
	if err != nil {
		return err
	}
	defer st.Close()
	e, err := idem.NewEngine(st, st, &idem.Config{Tracer: otelidem.NewTracer()})
	if err != nil {
		return err
	}
	if err := e.Register(orders.OrderMachine()); err != nil {
		return err
	}
	if err := e.Start(ctx); err != nil {
		return err
	}
	defer e.Stop(ctx)
	env, err := e.NewEnvelope("placed-1", orders.OrderPlaced{OrderID: "o-1", Items: 2})
	if err != nil {
		return err
	}
	r, err := e.PublishAndWait(ctx, env)
	if err != nil {
		return err
	}
	fmt.Printf("the user's program: order %s is %s\n", r.Key, r.State)
	return nil
}
EOF
}

# snapshot SRC DST: a git repository at DST holding SRC's work tree as it is
# (its committed files with their changes, and new files that git does not
# ignore) in one commit, so that a check sees what is about to be committed.
snapshot() {
	local src=$1 dst=$2
	mkdir -p "$dst"
	(cd "$src" && git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done |
		tar --null -T - -cf -) | tar -xf - -C "$dst"
	git -C "$dst" init -q
	git -C "$dst" config user.name "idem release check"
	git -C "$dst" config user.email "release-check@idem.invalid"
	git -C "$dst" add -A
	git -C "$dst" commit -q -m "the work tree of $src"
}
