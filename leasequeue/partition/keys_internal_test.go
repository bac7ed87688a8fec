package partition

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/golib/lease/internal/keyspace"
)

// TestNamesFollowTheLayout pins the lease keys of a group's members and
// partitions, and the Valkey roster's set, to the module's one encoding
// (package keyspace, whose tests prove it one to one).
func TestNamesFollowTheLayout(t *testing.T) {
	r := &ValkeyRoster{prefix: "lq:"}
	rapid.Check(t, func(t *rapid.T) {
		g, w := rapid.StringN(1, 16, 64).Draw(t, "group"), rapid.StringN(1, 16, 64).Draw(t, "worker")
		for _, c := range []struct{ what, got, want string }{
			{"member set", r.key(g), keyspace.Name("lq:", keyspace.Tag(g), ":members")},
			{"member lease", memberKey(g, w), keyspace.LeaseKey(g+"/", keyspace.GroupMember, w)},
			{"partition lease", partitionKey(g, w), keyspace.LeaseKey(g+"/", keyspace.GroupPartition, w)},
		} {
			if c.got != c.want {
				t.Fatalf("%s of group %q, worker %q is %q, want %q", c.what, g, w, c.got, c.want)
			}
		}
	})
}
