// Package allocator assigns external IPs from IPAddressPools to LoadBalancer
// Services. It is pure: no Kubernetes types, no I/O. The controller maps a
// Service (and its namespace's labels and its herald.io annotations) to a
// Service value, and the parsed configuration's pools to SetPools.
//
// # Rules
//
// Assign tries, in this order, and stops at the first that applies:
//
//  1. Requested IPs (herald.io/loadBalancerIPs or spec.loadBalancerIP): the
//     Service gets exactly those. Each must be in a pool (and in the
//     requested pool, if one is named too), all in one pool, and free or
//     shareable. autoAssign does not matter: asking by address is explicit.
//  2. A requested pool (herald.io/address-pool): the lowest free addresses
//     of that pool, whatever its autoAssign.
//  3. Automatic: pools with autoAssign whose serviceAllocation admits the
//     Service, ordered by priority (lower first; pools with a
//     serviceAllocation but no priority after those with one), then pools
//     with autoAssign and no serviceAllocation, ties broken by name. The
//     first pool that can serve wins.
//
// A serviceAllocation restricts every use of a pool, requests included: a
// Service is admitted when its namespace is listed in namespaces or matches
// a namespaceSelector (if either is set) and its labels match a
// serviceSelector (if any is set). A pool with only a priority admits all.
//
// Within a pool, the address is the lowest free one of the family, ranges
// taken in the order written. avoidBuggyIPs removes IPv4 addresses ending
// in .0 or .255 from the pool altogether: they are never chosen, cannot be
// requested, and a Service holding one after the flag is turned on is
// displaced. It never applies to IPv6.
//
// # Families
//
// SingleStack takes the first of Families; PreferDualStack takes every
// family of Families the chosen pool can give (the first pool that can give
// at least one wins), and on a later Assign adds a family that was missing
// if its pool can give it now; RequireDualStack needs one IP of each family
// from one pool. Requested IPs must be of the Service's families, at most one
// per family, and both families for RequireDualStack.
//
// # Sharing
//
// Services may hold the same IP when they carry the same sharing key
// (herald.io/allow-shared-ip, compared across namespaces), their (protocol,
// port) sets are disjoint, and either both use externalTrafficPolicy Cluster
// or both use Local and select the same pods (Backend equal): with Local,
// the nodes announcing the IP must have endpoints of every sharer. Without
// a requested IP, a Service with a sharing key prefers a pool where its
// group holds an IP it may share, and takes the lowest such IP; if none fits
// it gets an address of its own. Releasing one sharer leaves the IP to the
// others.
//
// # Stability
//
// IPs never move unless they must. Assign keeps what a Service holds while
// its pool still exists, holds the IPs and admits the Service, the IPs
// still answer the request (requested IPs, requested pool, families) and
// its sharers still accept it; a higher-priority pool appearing or
// autoAssign being turned off moves nobody. When the request changes, the
// Service's own IPs and pool are preferred again, and if the new request
// cannot be met the old IPs are kept while they are valid. Adopt rebuilds
// the state from Services' status at start without judging the request;
// a conflict (an IP another Service holds and may not share) is an error
// naming that Service, and nothing is recorded. SetPools keeps every
// Service whose IPs are still in one pool that admits it and returns the
// others, released, for the controller to assign again.
//
// # Data structures
//
// Each pool range keeps its free addresses as maximal intervals in a treap
// keyed by interval start, with 128-bit integer endpoints (no math/big on
// the hot path). Taking the lowest free address, taking a given address and
// returning one each touch at most two intervals: O(log k) for k intervals,
// and k is at most one more than the number of addresses in use, whatever
// the size of the range, so a /64 is one interval until used. Addresses
// skipped by avoidBuggyIPs are never stored: interval ends sit on usable
// addresses and neighbours separated only by skipped addresses are merged,
// so skipping costs O(1) arithmetic, never an enumeration. Address → pool is
// a binary search over the sorted ranges of all pools; Service → holding,
// IP → holders (with a port → holder map for the overlap check) and
// sharing key → IPs are maps. Pool ranges are scanned in order for the
// lowest free address, which is bounded by the configuration (at most 256
// ranges per pool), not by pool size.
//
// Totals per family are math/big integers (an IPv6 pool may exceed 2^64
// addresses); FamilyStats.TotalInt64 saturates as the pool status does.
//
// Every outcome is deterministic: pools are tried in a sorted order, ties
// between shareable IPs go to the lowest address, conflicts name the
// lowest-keyed Service, and SetPools reports in key order.
package allocator
