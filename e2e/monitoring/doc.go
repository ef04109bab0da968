// Package monitoring checks herald's monitoring bundle (the top-level
// monitoring/ folder): promtool, from Debian's prometheus package, checks
// the alert rules and runs their unit tests; the PrometheusRule carries
// the same rules; every herald metric the rules and the Grafana dashboard
// name is one herald exports.
package monitoring
