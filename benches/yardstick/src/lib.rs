//! A minimal Kubewarden policy: parses the ValidationRequest (settings and
//! AdmissionRequest) with the SDK and accepts. What any SDK policy pays per
//! request before it decides anything; the decision benchmark's yardstick.

use kubewarden_policy_sdk::{
    accept_request, protocol_version_guest, request::ValidationRequest, settings::Validatable, validate_settings,
    wapc_guest as guest,
};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Default, Debug)]
#[serde(default)]
struct Settings {}

impl Validatable for Settings {
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

fn validate(payload: &[u8]) -> guest::CallResult {
    let request = ValidationRequest::<Settings>::new(payload)?;
    std::hint::black_box(&request.request.object);
    accept_request()
}

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    guest::register_function("validate", validate);
    guest::register_function("validate_settings", validate_settings::<Settings>);
    guest::register_function("protocol_version", protocol_version_guest);
}
