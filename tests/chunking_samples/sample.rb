require "json"

module Shipping
  # Rates a parcel by weight and zone.
  class RateTable
    attr_reader :zones

    def initialize(zones)
      @zones = zones
    end

    def rate(weight, zone)
      base = @zones.fetch(zone)
      base * weight
    end

    def self.load(path)
      new(JSON.parse(File.read(path)))
    end
  end

  def self.default_zone
    "EU"
  end
end

def quote(weight)
  Shipping::RateTable.load("rates.json").rate(weight, Shipping.default_zone)
end
