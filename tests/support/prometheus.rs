//! The Prometheus recorder of a test binary: the `metrics` facade's recorder is global, so
//! one is installed on first use and shared by every test of the binary (each test names
//! its own connector or group, so their series do not mix).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The binary's recorder, installed on first use.
pub(crate) fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).expect("the only recorder of this binary");
        handle
    })
}
