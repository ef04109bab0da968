// Package layer2 is the speaker's layer-2 protocol. Its sub-packages
// decide (plan: what this node announces, election: the winner of each
// IP); this package is the wire: it answers ARP requests and IPv6 neighbor solicitations for
// the LoadBalancer IPs this node announces, and sends gratuitous ARP and
// unsolicited neighbor advertisements when it takes an IP over.
//
// It is built in three layers so that everything but the socket is tested
// without root:
//
//   - a codec (Decode, DecodeARP, DecodeNDP and the encoders) that turns
//     Ethernet frames into typed requests and back, validating every field
//     a receiver must check (RFC 826, RFC 5227, RFC 4861 §7.1.1) and
//     reporting what is wrong by name;
//   - Decide, a pure function from a received frame, the interface and the
//     announcer's state to the reply frame or the reason for not replying;
//   - Responder, the read-decide-write loop for one interface over the
//     Conn interface, implemented for real by AF_PACKET sockets from
//     ListenARP and ListenNDP and by a fake in the tests.
//
// Decoding is hand-written so that every rejection has a precise message;
// encoding uses gopacket's layers, which also gives the tests a second,
// independent implementation of the wire format and of the ICMPv6
// checksum to check the decoder against.
package layer2
