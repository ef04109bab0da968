package lbapi

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// annotationNames are every name herald reads a request annotation
// under: its own first, then MetalLB's.
func annotationNames(name string) []string {
	return append([]string{name}, AnnotationAliases[name]...)
}

// FuzzServiceAnnotations drives herald's parsers of Service annotations
// (ReadAnnotation, AliasNotes, and ReadRequest, which parses
// address-pool, allow-shared-ip and loadBalancerIPs, under herald's
// names and MetalLB's, and spec.loadBalancerIP) with any values. Nothing
// may panic; a refusal is a FieldError naming the annotation the value
// came from (or the spec field); what is accepted is what the user
// wrote: at most one valid, zone-free, unmapped address per family that
// reads back the same from the status herald writes, and the pool and
// sharing key as written, trimmed. It lives here rather than with the
// controller, which calls ReadRequest, because fuzzing instruments every
// package of the test binary: client-go's made it minutes longer.
//
// sel chooses the names: two bits each for the pool, the sharing key and
// the addresses (none, herald's, metallb.io's, metallb.universe.tf's);
// bit 6 sets the addresses under a second name too, bit 7 with another
// value (a conflict), bit 8 sets spec.loadBalancerIP to lbIP.
func FuzzServiceAnnotations(f *testing.F) {
	for _, c := range []struct {
		sel                    uint16
		pool, share, ips, lbIP string
	}{
		{1<<4 | 1<<2 | 1, "lan", "key", "198.51.100.210", ""},
		{1 << 4, "", "", " 198.51.100.210 , 2001:db8:0:1::210", ""},
		{2<<4 | 2<<2 | 2, "lan", "web-and-dns", "2001:db8::1,192.0.2.1", ""},
		{3<<4 | 3<<2 | 3, " lan ", " ", "192.0.2.1, 192.0.2.2", ""},
		{1<<6 | 1<<4, "", "", "192.0.2.1", ""},
		{1<<7 | 1<<6 | 1<<4, "", "", "192.0.2.1", "2001:db8::1"},
		{1<<8 | 1<<4, "", "", "192.0.2.1", "192.0.2.1"},
		{1 << 8, "", "", "", "192.0.2.7"},
		{1 << 8, "", "", "", "::ffff:192.0.2.7"},
		{1<<4 | 1, "   ", "", "fe80::1%eth0", ""},
		{1 << 4, "", "", "192.0.2.1,", ""},
		{1 << 4, "", "", "1.2.3.4,5.6.7.8,::1", ""},
		{1 << 4, "", "", "0192.0.2.1", ""},
	} {
		f.Add(c.sel, c.pool, c.share, c.ips, c.lbIP)
	}
	f.Fuzz(func(t *testing.T, sel uint16, pool, share, ips, lbIP string) {
		svc := svcWith(map[string]string{})
		set := func(name string, which uint16, v string) {
			if which != 0 {
				svc.Annotations[annotationNames(name)[which-1]] = v
			}
		}
		set(AnnotationAddressPool, sel&3, pool)
		set(AnnotationAllowSharedIP, sel>>2&3, share)
		ipsAt := sel >> 4 & 3
		set(AnnotationLoadBalancerIPs, ipsAt, ips)
		if ipsAt != 0 && sel&(1<<6) != 0 {
			second, v := annotationNames(AnnotationLoadBalancerIPs)[ipsAt%3], " "+ips
			if sel&(1<<7) != 0 {
				v = lbIP
			}
			svc.Annotations[second] = v
		}
		if sel&(1<<8) != 0 {
			svc.Spec.LoadBalancerIP = lbIP
		}

		read := map[string]Annotation{}
		for _, name := range []string{AnnotationAddressPool, AnnotationAllowSharedIP, AnnotationLoadBalancerIPs} {
			read[name] = checkRead(t, svc, name)
		}
		checkAliasNotes(t, svc, read)

		out, errs := ReadRequest(svc)
		poolAnn, ipsAnn := read[AnnotationAddressPool], read[AnnotationLoadBalancerIPs]
		if got, want := out.SharingKey, strings.TrimSpace(read[AnnotationAllowSharedIP].Value); got != want {
			t.Fatalf("sharing key %q, want %q", got, want)
		}
		if len(errs) > 0 {
			fields := []string{"spec.loadBalancerIP"}
			for _, a := range []Annotation{poolAnn, ipsAnn} {
				if a.Set() {
					fields = append(fields, "annotation "+a.Key)
				}
			}
			for _, err := range errs {
				if !slices.Contains(fields, err.Field) || !strings.HasPrefix(err.Error(), err.Field+": ") || err.Message == "" {
					t.Fatalf("error %q names %q, not one of the fields set: %q", err, err.Field, fields)
				}
			}
			if out.IPs != nil || out.Pool != "" {
				t.Fatalf("refused request keeps IPs %v, pool %q", out.IPs, out.Pool)
			}
			return
		}

		// Accepted: the pool is the one written.
		if poolAnn.Set() {
			if out.Pool == "" || out.Pool != strings.TrimSpace(poolAnn.Value) {
				t.Fatalf("pool %q from %s=%q", out.Pool, poolAnn.Key, poolAnn.Value)
			}
		} else if out.Pool != "" {
			t.Fatalf("pool %q without the annotation", out.Pool)
		}
		// Both ways of asking for addresses together are refused.
		if ipsAnn.Set() && svc.Spec.LoadBalancerIP != "" {
			t.Fatalf("accepted %s and spec.loadBalancerIP together", ipsAnn.Key)
		}
		source := ipsAnn.Value
		if !ipsAnn.Set() {
			source = svc.Spec.LoadBalancerIP
		}
		checkRequestedIPs(t, source, out.IPs)
	})
}

// checkRead checks ReadAnnotation: the value comes from the first name
// set (herald's before MetalLB's newer before its older), and the others
// set to another value are listed as overridden.
func checkRead(t *testing.T, svc *corev1.Service, name string) Annotation {
	t.Helper()
	a := ReadAnnotation(svc, name)
	var first string
	var overridden []string
	for _, k := range annotationNames(name) {
		v, ok := svc.Annotations[k]
		switch {
		case !ok:
		case first == "":
			first = k
		case strings.TrimSpace(v) != strings.TrimSpace(svc.Annotations[first]):
			overridden = append(overridden, k)
		}
	}
	if a.Name != name || a.Key != first || a.Value != svc.Annotations[first] || !slices.Equal(a.Overridden, overridden) {
		t.Fatalf("ReadAnnotation(%s) = %+v; the annotations are %q", name, a, svc.Annotations)
	}
	return a
}

// checkAliasNotes: a note for each value read under a MetalLB name, a
// conflict for each name overridden, each naming the annotations.
func checkAliasNotes(t *testing.T, svc *corev1.Service, read map[string]Annotation) {
	t.Helper()
	notes, conflicts := AliasNotes(svc)
	var wantNotes, wantConflicts int
	for name, a := range read {
		if a.Set() && a.Key != name {
			wantNotes++
			if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, a.Key) && strings.Contains(n, name) }) {
				t.Fatalf("no note names %s and %s: %q", a.Key, name, notes)
			}
		}
		for _, k := range a.Overridden {
			wantConflicts++
			if !slices.ContainsFunc(conflicts, func(c string) bool { return strings.Contains(c, a.Key) && strings.Contains(c, k) }) {
				t.Fatalf("no conflict names %s and %s: %q", a.Key, k, conflicts)
			}
		}
	}
	if len(notes) != wantNotes || len(conflicts) != wantConflicts {
		t.Fatalf("%d notes and %d conflicts, want %d and %d: %q %q", len(notes), len(conflicts), wantNotes, wantConflicts, notes, conflicts)
	}
}

// checkRequestedIPs: the accepted addresses are the comma-separated
// entries of source, in order, each a plain address (no zone, no
// IPv4-mapped form), at most one per family, and they read back the same
// from the status.loadBalancer.ingress herald writes for them.
func checkRequestedIPs(t *testing.T, source string, ips []netip.Addr) {
	t.Helper()
	if source == "" {
		if ips != nil {
			t.Fatalf("addresses %v without a request", ips)
		}
		return
	}
	parts := strings.Split(source, ",")
	if len(ips) != len(parts) || len(ips) > 2 || (len(ips) == 2 && ips[0].Is4() == ips[1].Is4()) {
		t.Fatalf("%q gave %v", source, ips)
	}
	for i, ip := range ips {
		if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() {
			t.Fatalf("%q gave %v: %v is not a plain address", source, ips, ip)
		}
		if again, err := netip.ParseAddr(strings.TrimSpace(parts[i])); err != nil || again != ip {
			t.Fatalf("%q gave %v: entry %d reads %v, %v", source, ips, i, again, err)
		}
	}
	svc := svcWith(nil)
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String()})
	}
	back, err := StatusIPs(svc)
	if err != nil || !slices.Equal(back, ips) {
		t.Fatalf("%v written to the status read back as %v, %v", ips, back, err)
	}
}
