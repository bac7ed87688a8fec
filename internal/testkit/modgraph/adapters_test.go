package modgraph_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// storeClients are the modules that only programs using a store link: an
// observability adapter must not bring them to a program that uses
// another store, or none.
var storeClients = []string{
	"github.com/valkey-io/valkey-go",
	"github.com/jackc/pgx/v5",
	"github.com/jackc/puddle/v2",
	"github.com/Masterminds/squirrel",
	// and the schedulers, which only programs using leasescheduler link
	"github.com/go-co-op/gocron/v2",
	"github.com/robfig/cron/v3",
}

// TestAdaptersLinkNoStoreClient checks that leaseprom and leaseotel link
// no store's client and no scheduler, and no package of this module that
// does (only the event leaves): a program on PostgreSQL alone gets no
// valkey-go by importing an adapter, one on Valkey alone no pgx or
// squirrel, and one without scheduled jobs no gocron.
func TestAdaptersLinkNoStoreClient(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, adapter := range []string{"leaseprom", "leaseotel"} {
		out := goCmd(t, root, "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", "./"+adapter)
		n := 0
		for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
			pkg, mod, _ := strings.Cut(line, " ")
			for _, c := range storeClients {
				if mod == c {
					t.Errorf("%s links %s (module %s)", adapter, pkg, mod)
				}
			}
			for _, own := range []string{"cache", "leasequeue", "leasescheduler", "fence", "backends"} {
				p := "github.com/golib/lease/" + own
				if pkg == p || strings.HasPrefix(pkg, p+"/") && !strings.HasSuffix(pkg, "event") {
					t.Errorf("%s links %s", adapter, pkg)
				}
			}
			n++
		}
		if n < 10 {
			t.Fatalf("%s has %d dependencies; the check proves nothing:\n%s", adapter, n, out)
		}
	}
}
