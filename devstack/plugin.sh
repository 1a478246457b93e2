# shellcheck shell=bash
# plugin.sh: devstack sources this file in each phase with the mode and the
# phase as arguments ("stack install", "unstack", ...).

# shellcheck source=devstack/lib/cyborg
source "$CYBORG_DIR/devstack/lib/cyborg"

if is_service_enabled cyborg-api cyborg-cond cyborg-agent; then
    case "$1:${2:-}" in
        stack:install)
            echo_summary "Installing cyborg"
            install_cyborg
            ;;
        stack:post-config)
            echo_summary "Configuring cyborg"
            configure_cyborg
            create_cyborg_accounts
            init_cyborg
            configure_nova_for_cyborg
            ;;
        stack:extra)
            echo_summary "Starting cyborg"
            start_cyborg
            ;;
        unstack:*)
            stop_cyborg
            ;;
        clean:*)
            cleanup_cyborg
            ;;
    esac
fi
