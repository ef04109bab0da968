package v1beta1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ConditionValid is the condition type herald sets on every configuration
// object: True when the object is in use, False (with the problems in the
// message) when the parser left it, or part of it, out.
const ConditionValid = "Valid"

// ConfigStatus is the status shared by the configuration kinds.
type ConfigStatus struct {
	// Conditions report whether herald accepted the object and, if not, why.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ObjectName names another herald object in the same namespace.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
type ObjectName string

// InterfaceName is a Linux network interface name.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=15
// +kubebuilder:validation:Pattern=`^[^/:\s]+$`
// +kubebuilder:validation:XValidation:rule="self != '.' && self != '..'",message="must be a Linux interface name, not '.' or '..'"
type InterfaceName string
