package status

import (
	"strings"
	"testing"
)

const speakerMetrics = `# HELP herald_speaker_bgp_session_up 1 when the BGP session to the peer is established, else 0.
# TYPE herald_speaker_bgp_session_up gauge
herald_speaker_bgp_session_up{address="192.0.2.1",peer="tor"} 1
herald_speaker_bgp_session_up{address="2001:db8::1",peer="tor"} 0
herald_speaker_bgp_session_up{address="192.0.2.2",peer="spine"} 0
# TYPE herald_speaker_bgp_bfd_up gauge
herald_speaker_bgp_bfd_up{address="192.0.2.1",peer="tor"} 1
# TYPE herald_speaker_bgp_prefixes_advertised gauge
herald_speaker_bgp_prefixes_advertised{peer="tor"} 3
herald_speaker_bgp_prefixes_advertised{peer="spine"} 0
# TYPE herald_speaker_bgp_prefixes_configured gauge
herald_speaker_bgp_prefixes_configured{peer="tor"} 3
herald_speaker_bgp_prefixes_configured{peer="spine"} 2
# TYPE herald_speaker_bgp_session_flaps_total counter
herald_speaker_bgp_session_flaps_total{peer="spine"} 4
# TYPE herald_speaker_members gauge
herald_speaker_members 3
`

func TestParseSessions(t *testing.T) {
	ss, err := ParseSessions("node1", strings.NewReader(speakerMetrics))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := RenderBGP(&b, BGPReport{Sessions: ss, Errors: []NodeError{{Node: "node2", Pod: "herald-speaker-x", Error: "the server is currently unable to handle the request"}}}); err != nil {
		t.Fatal(err)
	}
	want := `NODE   PEER   ADDRESS      STATE        BFD  PREFIXES (ADVERTISED/MEANT)  FLAPS
node1  spine  192.0.2.2    Down         -    0/2                          4
node1  tor    192.0.2.1    Established  up   3/3                          0
node1  tor    2001:db8::1  Down         -    3/3                          0
speaker herald-speaker-x on node2: the server is currently unable to handle the request
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	if _, err := ParseSessions("node1", strings.NewReader("not { metrics")); err == nil {
		t.Error("garbage parsed")
	}
}
