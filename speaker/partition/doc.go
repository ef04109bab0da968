// Package partition is the speaker's partition safety: everything that
// keeps an address from moving, or from being answered twice, when
// memberlist cannot tell a dead speaker from one it cannot reach.
//
//   - Minority and isolation. A speaker whose memberlist view is a
//     minority of the speakers it knows of (Standing.Minority) waits one
//     heartbeat window, then holds back while a speaker outside its view
//     renews the Lease herald-speakers (speaker/heartbeat is the wire), and
//     takes over once none has for a window.
//   - Recovery. A speaker the cluster counted out (an isolation, or a
//     death it refuted) ranks after healthy nodes for the recovery hold,
//     so a flapping speaker's addresses move once, not on every flap.
//   - Restarts in place. A member that left saying it restarts stays
//     elected for the restart hold, and counts in the view.
//   - Takeover checks. An address won from a member declared dead is
//     answered only once the LAN shows that member no longer answers
//     (Takeovers), within MaxTakeoverHold.
//   - The proxy. An address is answered once this node's proxy has its
//     rules (ProxyWait), within MaxProxyWait.
//
// The node-wide decisions are one pure state machine, Step, with two
// regions (where the view stands; whether the speaker recovers); Guard
// holds its state and what feeds it for the goroutines that step it.
// Takeovers and ProxyWait are the per-address holds. Nothing here
// touches the network or the API: checks and the proxy are interfaces.
package partition
