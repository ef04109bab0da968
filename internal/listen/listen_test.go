package listen

import "testing"

func TestCheck(t *testing.T) {
	for addr, ok := range map[string]bool{
		":7472": true, "0.0.0.0:10256": true, "127.0.0.1:10249": true, "[::1]:7473": true, "[::]:0": true,
		"7472": false, ":99999": false, "localhost:7472": false, "node1:80": false, ":port": false, "": false,
	} {
		if err := Check(addr); (err == nil) != ok {
			t.Errorf("%q: %v", addr, err)
		}
	}
}
