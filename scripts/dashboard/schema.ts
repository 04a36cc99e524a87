// The type a Grafana dashboard file must have, built from Grafana's published types only:
// @grafana/schema (Grafana's own TypeScript types, generated from its CUE kinds: the dashboard, the
// panel and row, template variables, field config, and the options of each panel plugin) and the
// Prometheus query of the Grafana Foundation SDK. The dashboard types are the raw ones generated
// from the dashboard kind (raw/dashboard/x), not the hand-written veneer the package exports as
// `Dashboard` for Grafana's frontend, which loosens some fields (nullable datasources) and retypes
// others (an annotation's target as a data query, where the kind says AnnotationTarget). scripts/check_dashboard.mjs type-checks each
// dashboard file as a TypeScript object literal of type `Dashboard`, so a field the schema does
// not know, a missing required one, a wrong type or a value outside an enum is a compile error.
//
// What this file adds to the published types, and nothing else:
//   - Json<T>: the generated enums are TypeScript string enums, which a JSON string can never be;
//     Json<T> replaces each by the union of its values (`${E}`), recursively. Numeric enums stay.
//   - each panel `type` is bound to that plugin's own Options and FieldConfig types (the schema
//     leaves `options` a Record<string, unknown>); a plugin not listed here is refused, so adding
//     one means adding its types from @grafana/schema below.
//   - targets are Prometheus queries (the schema leaves them Record<string, unknown>).
import type * as schema from "@grafana/schema/dist/types/raw/dashboard/x/dashboard_types.gen";
import type * as bargauge from "@grafana/schema/dist/types/raw/composable/bargauge/panelcfg/x/BarGaugePanelCfg_types.gen";
import type * as stat from "@grafana/schema/dist/types/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen";
import type * as timeseries from "@grafana/schema/dist/types/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen";
import type * as prometheus from "@grafana/grafana-foundation-sdk/dist/prometheus/types.gen";

export type Json<T> = T extends string
  ? string extends T ? string : `${T}`
  : T extends number | boolean | null | undefined
    ? T
    : T extends readonly (infer U)[]
      ? Json<U>[]
      : T extends object
        ? { [K in keyof T]: Json<T[K]> }
        : T;

/** A Prometheus query as Grafana stores it in a panel (the SDK's builder marker method removed). */
export type PrometheusQuery = Json<Omit<prometheus.dataquery, "_implementsDataqueryVariant">>;

/** fieldConfig with the plugin's own `custom` field config (none: `custom` must stay empty). */
type FieldConfigSource<Custom> = Json<Omit<schema.FieldConfigSource, "defaults">> & {
  defaults: Json<Omit<schema.FieldConfig, "custom">> & { custom?: Json<Custom> };
};

type PanelOf<Type extends string, Options, Custom> = Json<
  Omit<schema.Panel, "type" | "options" | "fieldConfig" | "targets">
> & {
  type: Type;
  options?: Json<Options>;
  fieldConfig?: FieldConfigSource<Custom>;
  targets?: PrometheusQuery[];
};

export type Panel =
  | PanelOf<"timeseries", timeseries.Options, timeseries.FieldConfig>
  | PanelOf<"stat", stat.Options, Record<string, never>>
  | PanelOf<"bargauge", bargauge.Options, Record<string, never>>;

export type RowPanel = Json<Omit<schema.RowPanel, "panels">> & { panels: Panel[] };

export type Dashboard = Json<Omit<schema.Dashboard, "panels">> & { panels?: (Panel | RowPanel)[] };

// scripts/check_dashboard.mjs checks a file in parts, because the compiler reports an unknown field
// of an object only when none of the object's other fields has an error: the top-level keys
// (Keys: presence and spelling), then each top-level value (Field), then each panel on its own.

/** The keys of T with T's optionality, any values. */
export type Keys<T> = { [K in keyof T]: unknown };

/** The type of the dashboard's field K (unknown for a key Dashboard does not have: Keys reports it). */
export type Field<K extends PropertyKey> = K extends keyof Dashboard ? Dashboard[K] : unknown;
