package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

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

	// InForce is the version of the object herald uses. It follows the
	// spec while edits are valid; when an edit is refused it keeps the
	// last valid version, so a bad edit never moves or withdraws anything.
	// +optional
	InForce *InForce `json:"inForce,omitempty"`
}

// InForce is a copy of the last valid version of an object, kept by the
// controller in the object's status. The controller and every speaker fall
// back to it when the current spec is invalid, and a component that starts
// while the spec is invalid reads it from here, so all of them agree.
type InForce struct {
	// Generation is the metadata.generation of the version in force.
	Generation int64 `json:"generation"`
	// Since is when the controller first found this generation valid.
	// +optional
	Since metav1.Time `json:"since,omitempty"`
	// Spec is that generation's spec, as it was written.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Spec runtime.RawExtension `json:"spec"`
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
