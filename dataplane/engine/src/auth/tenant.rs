//! The tenant's lists: models, adapters, routes and subjects. Each check
//! runs before the lookup that would tell whether the thing exists, and a
//! refusal answers exactly as a thing that does not exist would.
//! `None` for the tenant means `auth.mode = "none"`: everything is allowed.

pub use crate::route::RouteFound;
use crate::route::RouteKey;
use crate::tables::{Tables, Tenant};
use crate::vocab::{Cause, Refusal};

/// The model name is in the tenant's `models`.
pub fn model_allowed(tn: Option<&Tenant>, model: &str) -> Result<(), Refusal> {
    match tn {
        Some(t) if !t.allows_model(model) => Err(Refusal::of(Cause::TenantModel)),
        _ => Ok(()),
    }
}

/// The adapter (when the request names one) is in the tenant's `adapters`.
pub fn adapter_allowed(tn: Option<&Tenant>, adapter: &str) -> Result<(), Refusal> {
    match tn {
        Some(t) if !adapter.is_empty() && !t.allows_adapter(adapter) => {
            Err(Refusal::of(Cause::TenantAdapter))
        }
        _ => Ok(()),
    }
}

/// The negotiated subject is in the tenant's `subjects`.
pub fn subject_allowed(tn: Option<&Tenant>, subject: &str) -> Result<(), Refusal> {
    match tn {
        Some(t) if !t.allows_subject(subject) => Err(Refusal::of(Cause::TenantSubject)),
        _ => Ok(()),
    }
}

/// The subject of the schema a request names is in the tenant's
/// `subjects`; otherwise the schema id does not exist for it.
pub fn schema_allowed(tn: Option<&Tenant>, subject: &str) -> Result<(), Refusal> {
    match tn {
        Some(t) if !t.allows_subject(subject) => Err(Refusal::of(Cause::TenantSchema)),
        _ => Ok(()),
    }
}

/// The first matching route among those the tenant may use: routes outside
/// its `routes` do not exist for it, so a later route may take the request.
pub fn route_for<'t>(t: &'t Tables, key: &RouteKey<'_>, tn: Option<&Tenant>) -> RouteFound<'t> {
    t.routes
        .first_allowed(key, |r| tn.is_none_or(|tn| tn.allows_route(&r.name)))
}
